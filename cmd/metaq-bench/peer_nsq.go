package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"metaq/internal/freeport"
)

// NSQ speaks a small framed TCP protocol; the few commands the load needs
// are written here directly, so the bench needs no NSQ client module.
const (
	nsqFrameResponse = 0
	nsqFrameError    = 1
	nsqFrameMessage  = 2
	nsqHeartbeat     = "_heartbeat_"
	nsqMsgHeader     = 8 + 2 + 16 // timestamp, attempts, id
	nsqRdy           = 2500       // nsqd's default --max-rdy-count
)

// findNSQD returns the nsqd binary: the flag value, else nsqd on $PATH, else
// $GOPATH/bin/nsqd, else ~/go/bin/nsqd (where `go build`/`go install` put it).
func findNSQD(flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	if p, err := exec.LookPath("nsqd"); err == nil {
		return p, nil
	}
	var cands []string
	if gp := os.Getenv("GOPATH"); gp != "" {
		for _, d := range filepath.SplitList(gp) {
			cands = append(cands, filepath.Join(d, "bin", "nsqd"))
		}
	}
	if home, err := os.UserHomeDir(); err == nil {
		cands = append(cands, filepath.Join(home, "go", "bin", "nsqd"))
	}
	for _, c := range cands {
		if fi, err := os.Stat(c); err == nil && !fi.IsDir() {
			return c, nil
		}
	}
	return "", errors.New("nsq: nsqd not found (set -nsqd, or build it from the Go module github.com/nsqio/nsq v1.3.0; see COMPARE.md)")
}

func nsqTopic(o options, p int) string { return fmt.Sprintf("%s-p%d", o.topic, p) }

// startNSQ runs nsqd as a child process on loopback with a fresh temporary
// data directory and --mem-queue-size=0, so every message goes through its
// disk queue (the disk-backed mode), with nsqd's default fsync policy
// (every 2500 messages or 2 s, so an acknowledged PUB is not yet on disk).
// Each partition of o is one topic; with consumers, each topic gets the
// channel "bench" before the load starts.
func startNSQ(o options, binFlag string) (target, error) {
	bin, err := findNSQD(binFlag)
	if err != nil {
		return target{}, err
	}
	dir, err := os.MkdirTemp("", "metaq-bench-nsq-")
	if err != nil {
		return target{}, err
	}
	tcpPort, err1 := freeport.One()
	httpPort, err2 := freeport.One()
	if err := errors.Join(err1, err2); err != nil {
		os.RemoveAll(dir)
		return target{}, fmt.Errorf("nsq: %w", err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", tcpPort)
	httpAddr := fmt.Sprintf("127.0.0.1:%d", httpPort)
	cmd := exec.Command(bin,
		"--tcp-address="+addr, "--http-address="+httpAddr, "-broadcast-address=127.0.0.1",
		"-data-path="+dir, "--mem-queue-size=0", "--log-level=fatal",
		fmt.Sprintf("--max-msg-size=%d", max(o.size+1024, 1<<20)))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	proc, err := startChild(cmd)
	if err != nil {
		os.RemoveAll(dir)
		return target{}, fmt.Errorf("nsq: start %s: %w", bin, err)
	}
	stop := func() {
		proc.stop(os.Interrupt, 10*time.Second)
		os.RemoveAll(dir)
	}
	if err := nsqReady(httpAddr, proc.exited); err != nil {
		stop()
		return target{}, err
	}
	for p := range max(o.partitions, 1) {
		q := url.Values{"topic": {nsqTopic(o, p)}}
		if err := nsqPost(httpAddr, "/topic/create", q); err != nil {
			stop()
			return target{}, err
		}
		if o.consumers > 0 {
			q.Set("channel", "bench")
			if err := nsqPost(httpAddr, "/channel/create", q); err != nil {
				stop()
				return target{}, err
			}
		}
	}
	return target{
		name:    "nsq",
		addr:    addr,
		produce: func(ctx context.Context, n int, st *stats) error { return nsqProduce(ctx, o, addr, n, st) },
		consume: func(ctx context.Context, n int, st *stats) error { return nsqConsume(ctx, o, addr, n, st) },
		close:   stop,
	}, nil
}

func nsqReady(httpAddr string, exited <-chan struct{}) error {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return errors.New("nsq: nsqd exited at start")
		default:
		}
		resp, err := http.Get("http://" + httpAddr + "/ping")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return errors.New("nsq: nsqd not ready within 10s")
}

func nsqPost(httpAddr, path string, q url.Values) error {
	resp, err := http.Post("http://"+httpAddr+path+"?"+q.Encode(), "text/plain", nil)
	if err != nil {
		return fmt.Errorf("nsq: %s: %w", path, err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("nsq: %s %s: %s", path, q.Encode(), resp.Status)
	}
	return nil
}

// nsqDial opens a V2 protocol connection.
func nsqDial(ctx context.Context, addr string) (net.Conn, error) {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("nsq: %w", err)
	}
	if _, err := nc.Write([]byte("  V2")); err != nil {
		nc.Close()
		return nil, fmt.Errorf("nsq: %w", err)
	}
	go func() { <-ctx.Done(); nc.Close() }()
	return nc, nil
}

// nsqReadFrame reads one frame into buf (grown as needed).
func nsqReadFrame(r *bufio.Reader, buf []byte) (int32, []byte, error) {
	var hdr [8]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, buf, err
	}
	size := int(binary.BigEndian.Uint32(hdr[:4]))
	if size < 4 || size > 64<<20 {
		return 0, buf, fmt.Errorf("nsq: bad frame size %d", size)
	}
	typ := int32(binary.BigEndian.Uint32(hdr[4:]))
	if cap(buf) < size-4 {
		buf = make([]byte, size-4)
	}
	buf = buf[:size-4]
	_, err := io.ReadFull(r, buf)
	return typ, buf, err
}

// nsqProduce runs one producer connection: PUB commands pipelined, o.inflight
// outstanding. nsqd answers a connection's commands in order, so a FIFO of
// send times matches answers to publishes.
func nsqProduce(ctx context.Context, o options, addr string, n int, st *stats) error {
	nc, err := nsqDial(ctx, addr)
	if err != nil {
		return err
	}
	defer nc.Close()
	parts := max(o.partitions, 1)
	cmds := make([][]byte, parts) // "PUB topic\n" + size + body, per topic
	body := []byte(strings.Repeat("m", o.size))
	for p := range parts {
		c := []byte("PUB " + nsqTopic(o, p) + "\n")
		c = binary.BigEndian.AppendUint32(c, uint32(len(body)))
		cmds[p] = append(c, body...)
	}
	sent := make(chan time.Time, o.inflight)
	readErr := make(chan error, 1)
	w := bufio.NewWriterSize(nc, 256<<10)
	go func() {
		r := bufio.NewReaderSize(nc, 64<<10)
		var buf []byte
		for {
			typ, data, err := nsqReadFrame(r, buf)
			buf = data
			if err != nil {
				readErr <- err
				return
			}
			switch {
			case typ == nsqFrameResponse && string(data) == nsqHeartbeat:
				// Heartbeats come from nsqd's own goroutine; answering
				// would race the writer, and producers never go quiet
				// long enough to be dropped for missing NOPs.
				continue
			case typ == nsqFrameResponse && string(data) == "OK":
				st.observePut(time.Since(<-sent), true)
			default:
				st.observePut(time.Since(<-sent), false)
				readErr <- fmt.Errorf("nsq: PUB answered %d %q", typ, data)
				return
			}
		}
	}()
	part := n % parts
	for {
		// Block for the first slot, then batch every free slot into one write.
		select {
		case sent <- time.Now():
		case err := <-readErr:
			return err
		case <-ctx.Done():
			return nil
		}
		for k := 0; ; k++ {
			part = (part + 1) % parts
			if _, err := w.Write(cmds[part]); err != nil {
				return err
			}
			if k >= 64 {
				break
			}
			select {
			case sent <- time.Now():
				continue
			default:
			}
			break
		}
		if err := w.Flush(); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}

// nsqConsume subscribes to the channel "bench" of each topic assigned to
// consumer n (one connection per topic, as NSQ allows one SUB per
// connection) and finishes every message it receives.
func nsqConsume(ctx context.Context, o options, addr string, n int, st *stats) error {
	parts := max(o.partitions, 1)
	errCh := make(chan error, parts)
	started := 0
	for p := range parts {
		if !(o.consumers > parts || p%o.consumers == n) {
			continue
		}
		started++
		go func() { errCh <- nsqSubscribe(ctx, addr, nsqTopic(o, p), st) }()
	}
	var first error
	for range started {
		if err := <-errCh; err != nil && first == nil && ctx.Err() == nil {
			first = err
		}
	}
	return first
}

func nsqSubscribe(ctx context.Context, addr, topic string, st *stats) error {
	nc, err := nsqDial(ctx, addr)
	if err != nil {
		return err
	}
	defer nc.Close()
	r := bufio.NewReaderSize(nc, 1<<20)
	w := bufio.NewWriterSize(nc, 64<<10)
	fmt.Fprintf(w, "SUB %s bench\n", topic)
	if err := w.Flush(); err != nil {
		return err
	}
	typ, data, err := nsqReadFrame(r, nil)
	if err != nil {
		return err
	}
	if typ != nsqFrameResponse || string(data) != "OK" {
		return fmt.Errorf("nsq: SUB %s answered %d %q", topic, typ, data)
	}
	fmt.Fprintf(w, "RDY %d\n", nsqRdy)
	if err := w.Flush(); err != nil {
		return err
	}
	fin := []byte("FIN 0123456789abcdef\n")
	buf := data
	for {
		typ, data, err := nsqReadFrame(r, buf)
		buf = data
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		switch typ {
		case nsqFrameMessage:
			if len(data) < nsqMsgHeader {
				return fmt.Errorf("nsq: short message frame (%d bytes)", len(data))
			}
			st.observeConsume(int64(len(data) - nsqMsgHeader))
			copy(fin[4:20], data[10:26])
			w.Write(fin)
		case nsqFrameResponse:
			if string(data) == nsqHeartbeat {
				w.WriteString("NOP\n")
			}
		default:
			return fmt.Errorf("nsq: %s: error frame %q", topic, data)
		}
		// Send the FINs of everything already read in one write.
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
		}
	}
}
