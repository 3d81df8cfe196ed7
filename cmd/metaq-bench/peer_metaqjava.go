package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"metaq/broker/wire"
	"metaq/internal/freeport"
)

var javaCmdFlag = flag.String("metaq-java", "",
	"for -peer/-compare metaq-java: shell command that starts a MetaQ Java broker in the foreground; {port} and {data} "+
		"are replaced by a free loopback port and a fresh data dir, and the broker must serve -topic with -partitions "+
		"partitions (COMPARE.md shows one)")

// javaStartTimeout bounds the JVM start, the broker's ZooKeeper
// registration and its first answered put.
const javaStartTimeout = 90 * time.Second

// startMetaQJava runs the command of -metaq-java as a child process and
// drives it with the same produce and consume as our broker: it speaks the
// same protocol. The process is stopped with SIGTERM (MetaQ's shutdown hook
// unregisters from ZooKeeper), then killed if it has not exited in 30 s.
func startMetaQJava(o options, tmpl string) (target, error) {
	if strings.TrimSpace(tmpl) == "" {
		return target{}, errors.New("metaq-java: set -metaq-java to the command that starts the broker")
	}
	dir, err := os.MkdirTemp("", "metaq-bench-java-")
	if err != nil {
		return target{}, err
	}
	port, err := freeport.One()
	if err != nil {
		os.RemoveAll(dir)
		return target{}, fmt.Errorf("metaq-java: %w", err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	line := strings.NewReplacer("{port}", strconv.Itoa(port), "{data}", dir).Replace(tmpl)
	logPath := dir + ".log"
	logf, err := os.Create(logPath)
	if err != nil {
		os.RemoveAll(dir)
		return target{}, err
	}
	// exec: the shell becomes the broker, so the signal reaches it.
	cmd := exec.Command("sh", "-c", "exec "+line)
	cmd.Stdout, cmd.Stderr = logf, logf
	proc, err := startChild(cmd)
	if err != nil {
		logf.Close()
		os.RemoveAll(dir)
		os.Remove(logPath)
		return target{}, fmt.Errorf("metaq-java: start %q: %w", line, err)
	}
	stop := func() {
		proc.stop(syscall.SIGTERM, 30*time.Second)
		logf.Close()
		os.RemoveAll(dir)
		os.Remove(logPath)
	}
	if err := putReady(addr, o.topic, proc.exited); err != nil {
		logf.Sync()
		tail := logTail(logPath, 2048)
		stop()
		return target{}, fmt.Errorf("metaq-java: %q: %w; its output ended with:\n%s", line, err, tail)
	}
	return metaqTarget(o, "metaq-java", addr, stop), nil
}

// putReady waits until the broker at addr stores a put to topic partition 0:
// listening is not enough, MetaQ accepts connections before its topics are
// registered.
func putReady(addr, topic string, exited <-chan struct{}) error {
	deadline := time.Now().Add(javaStartTimeout)
	body := []byte("ready")
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return errors.New("the broker exited at start")
		default:
		}
		last = putOnce(addr, &wire.Put{Topic: topic, Partition: 0, Checksum: wire.Checksum(body), Body: body, Opaque: 1})
		if last == nil {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("no put stored within %v: %w", javaStartTimeout, last)
}

func putOnce(addr string, put *wire.Put) error {
	nc, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(5 * time.Second))
	if err := wire.Write(nc, put); err != nil {
		return err
	}
	cmd, err := wire.NewDecoder(bufio.NewReader(nc)).Decode()
	if err != nil {
		return err
	}
	if r, ok := cmd.(*wire.Result); !ok || !r.OK() {
		return fmt.Errorf("put answered %v", cmd)
	}
	return nil
}

// logTail returns the last n bytes of the file at path.
func logTail(path string, n int64) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	if int64(len(b)) > n {
		b = b[int64(len(b))-n:]
	}
	return string(b)
}
