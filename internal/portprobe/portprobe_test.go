package portprobe

import (
	"bufio"
	"context"
	"net"
	"testing"
	"time"

	"metaq/internal/testutil"
)

func TestMetaQ(t *testing.T) {
	metaq := testutil.ServeTCP(t, func(c net.Conn) {
		line, _ := bufio.NewReader(c).ReadString('\n')
		if line == "version 0\r\n" {
			c.Write([]byte("result 200 1.4.6 0\r\n"))
		}
	})
	closer := testutil.ServeTCP(t, func(c net.Conn) {})
	silent := testutil.ServeTCP(t, func(c net.Conn) { time.Sleep(2 * time.Second) })
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
