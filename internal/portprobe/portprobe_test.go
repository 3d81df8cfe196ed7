package portprobe

import (
	"bufio"
	"context"
	"net"
	"testing"
	"time"
)

func serve(t *testing.T, answer func(c net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); answer(c) }()
		}
	}()
	return l.Addr().String()
}

func TestMetaQ(t *testing.T) {
	metaq := serve(t, func(c net.Conn) {
		line, _ := bufio.NewReader(c).ReadString('\n')
		if line == "version 0\r\n" {
			c.Write([]byte("result 200 1.4.6 0\r\n"))
		}
	})
	closer := serve(t, func(c net.Conn) {})
	silent := serve(t, func(c net.Conn) { time.Sleep(2 * time.Second) })
	ctx := context.Background()
	if got, ok := MetaQ(ctx, metaq, time.Second); !ok || got != "result 200 1.4.6 0" {
		t.Errorf("MetaQ server: %q %v", got, ok)
	}
	for name, addr := range map[string]string{"closes": closer, "silent": silent, "nothing listens": "127.0.0.1:1"} {
		if got, ok := MetaQ(ctx, addr, 300*time.Millisecond); ok {
			t.Errorf("%s: %q reported as MetaQ", name, got)
		}
	}
}
