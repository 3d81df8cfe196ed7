package bundle

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"metaq/internal/testutil"
)

// vectorExchange returns the request and answer bytes of one named entry
// of a spec vector file (c: and s: hex lines).
func vectorExchange(t *testing.T, file, name string) (req, resp []byte) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "broker", "testdata", "vectors", file))
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(data), "=== "+name+"\n")
	if !ok {
		t.Fatalf("%s has no entry %s", file, name)
	}
	block, _, _ = strings.Cut(block, "\n=== ")
	for _, line := range strings.Split(block, "\n") {
		var dst *[]byte
		switch {
		case strings.HasPrefix(line, "c: "):
			dst = &req
		case strings.HasPrefix(line, "s: "):
			dst = &resp
		default:
			continue
		}
		b, err := hex.DecodeString(strings.TrimSpace(line[3:]))
		if err != nil {
			t.Fatalf("%s %s: %v", file, name, err)
		}
		*dst = b
	}
	return req, resp
}

// TestTransactionsFromTheFirstConnection replays a transaction vector on a
// connection made the moment the broker port accepts, while the bundle is
// still starting: the transaction handler must already be installed (it
// answered "Transactions are not supported by this broker" when it was
// installed after the port opened).
func TestTransactionsFromTheFirstConnection(t *testing.T) {
	t.Parallel()
	req, want := vectorExchange(t, "transaction.txt", "local-begin")
	for round := 0; round < 5; round++ {
		dir := t.TempDir()
		port := testutil.FreePort(t)
		ini := filepath.Join(dir, "server.ini")
		os.WriteFile(ini, []byte(fmt.Sprintf("[system]\nbrokerId=0\nhostName=127.0.0.1\nserverPort=%d\nnumPartitions=1\nunflushThreshold=0\nunflushInterval=1000\nmaxSegmentSize=1048576\nmaxTransferSize=1048576\n"+
			"dataPath=%s\n[zookeeper]\nzk.zkEnable=false\n[replication]\nlisten=127.0.0.1:0\n[topic=test]\n", port, filepath.Join(dir, "data"))), 0o644)
		addr := "127.0.0.1:" + strconv.Itoa(port)
		got := make(chan []byte, 1)
		stop := make(chan struct{})
		go func() {
			for {
				select {
				case <-stop:
					got <- nil
					return
				default:
				}
				c, err := net.DialTimeout("tcp", addr, time.Second)
				if err != nil {
					time.Sleep(100 * time.Microsecond)
					continue
				}
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				c.Write(req)
				buf := make([]byte, len(want))
				n, _ := io.ReadFull(c, buf)
				got <- buf[:n]
				return
			}
		}()
		b, err := New(Options{ConfigPath: ini, Logger: testutil.Logger(t, slog.LevelInfo), ListenAddr: addr, AdminAddr: "127.0.0.1:0"})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		var answer []byte
		select {
		case answer = <-got:
		case <-time.After(15 * time.Second):
			close(stop)
			answer = <-got
		}
		b.Close()
		if !bytes.Equal(answer, want) {
			t.Fatalf("round %d: first connection answered %q, want %q", round, answer, want)
		}
	}
}
