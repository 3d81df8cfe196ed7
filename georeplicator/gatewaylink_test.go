package georeplicator

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"metaq/internal/testutil"
)

// gatewayCerts returns a master's TLS config that requires client
// certificates of one CA, and a slave's with such a certificate.
func gatewayCerts(t *testing.T) (slave, master *tls.Config) {
	t.Helper()
	dir := t.TempDir()
	ca, caKey := testutil.WriteCert(t, dir, "ca", true, nil, nil)
	testutil.WriteCert(t, dir, "master", false, ca, caKey)
	testutil.WriteCert(t, dir, "slave", false, ca, caKey)
	p := func(n string) string { return dir + "/" + n }
	master, err := ServerTLS(p("master.pem"), p("master.key"), p("ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	slave, err = ClientTLS(p("slave.pem"), p("slave.key"), p("ca.pem"), "")
	if err != nil {
		t.Fatal(err)
	}
	return slave, master
}

// gatewayPair runs GatewayDial and GatewayAccept over a TCP loopback pair,
// the master consuming the first byte as the broker's sniffing leaves it
// (peeked, not read: GatewayAccept reads it).
func gatewayPair(t *testing.T, slaveSecret []byte, masterSecrets [][]byte, compress bool, slaveTLS, masterTLS *tls.Config) (slave, master net.Conn, slaveErr, masterErr error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			ch <- res{nil, err}
			return
		}
		c, err := GatewayAccept(nc, masterSecrets, masterTLS)
		if err != nil {
			nc.Close()
		}
		ch <- res{c, err}
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	slave, slaveErr = GatewayDial(nc, slaveSecret, compress, slaveTLS)
	r := <-ch
	for _, c := range []net.Conn{slave, r.c} {
		if c != nil {
			t.Cleanup(func() { c.Close() })
		}
	}
	return slave, r.c, slaveErr, r.err
}

// TestGatewayLinkCarriesBytes: both ways, with and without a secret and
// compression, every write arrives whole and in order, and a reader gets
// each write as soon as it is sent (the master answers puts one by one).
func TestGatewayLinkCarriesBytes(t *testing.T) {
	key := []byte("0123456789abcdef0123")
	for _, tc := range []struct {
		name     string
		secret   []byte
		compress bool
		tls      bool
	}{{"plain", nil, false, false}, {"zstd", nil, true, false}, {"secret", key, false, false}, {"secret+zstd", key, true, false},
		{"secret+zstd+tls", key, true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			var secrets [][]byte
			if tc.secret != nil {
				secrets = [][]byte{[]byte("an-older-secret-0000"), tc.secret}
			}
			var st, mt *tls.Config
			if tc.tls {
				st, mt = gatewayCerts(t)
			}
			s, m, serr, merr := gatewayPair(t, tc.secret, secrets, tc.compress, st, mt)
			if serr != nil || merr != nil {
				t.Fatalf("handshake: slave %v, master %v", serr, merr)
			}
			for _, dir := range []struct{ w, r net.Conn }{{s, m}, {m, s}} {
				br := bufio.NewReader(dir.r)
				for i := range 50 {
					line := fmt.Sprintf("put orders %d 100 0 %d\r\n%s\r\n", i%2, i, strings.Repeat("log line ", i))
					if _, err := dir.w.Write([]byte(line)); err != nil {
						t.Fatal(err)
					}
					dir.r.SetReadDeadline(time.Now().Add(5 * time.Second))
					got := make([]byte, len(line))
					if _, err := io.ReadFull(br, got); err != nil || string(got) != line {
						t.Fatalf("write %d: read %q %v, want %q", i, got, err, line)
					}
				}
			}
		})
	}
}

// TestGatewayLinkAuth: a slave with a different secret, or with none when
// the master has one, is refused, and so is a master that has none when
// the slave has one; a master that requires client certificates refuses a
// plain link, and one without TLS refuses a TLS link.
func TestGatewayLinkAuth(t *testing.T) {
	st, mt := gatewayCerts(t)
	key := []byte("secret-a-0123456789")
	if _, _, serr, merr := gatewayPair(t, key, [][]byte{key}, true, nil, mt); !errors.Is(serr, ErrAuth) || !errors.Is(merr, ErrAuth) ||
		!strings.Contains(serr.Error(), "requires TLS") {
		t.Fatalf("plain link to a master requiring TLS: slave %v, master %v", serr, merr)
	}
	if _, _, serr, merr := gatewayPair(t, key, [][]byte{key}, true, st, nil); serr == nil || !errors.Is(merr, ErrAuth) {
		t.Fatalf("TLS link to a master without TLS: slave %v, master %v", serr, merr)
	}
	a, b := []byte("secret-a-0123456789"), []byte("secret-b-0123456789")
	for _, tc := range []struct {
		name   string
		slave  []byte
		master [][]byte
	}{{"wrong secret", a, [][]byte{b}}, {"slave without", nil, [][]byte{b}}, {"master without", a, nil}} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, serr, merr := gatewayPair(t, tc.slave, tc.master, true, nil, nil)
			if !errors.Is(serr, ErrAuth) {
				t.Fatalf("slave: %v, want ErrAuth", serr)
			}
			if tc.master != nil && !errors.Is(merr, ErrAuth) {
				t.Fatalf("master: %v, want ErrAuth", merr)
			}
		})
	}
}

// TestGatewayLinkFrameMAC: a byte changed on the path fails the frame's
// MAC, and the reader stops.
func TestGatewayLinkFrameMAC(t *testing.T) {
	key := []byte("0123456789abcdef0123")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// A relay that flips one payload byte of the first frame after the
	// handshake (slave→master bytes past the hello and proof).
	masterLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer masterLn.Close()
	go func() {
		in, err := ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", masterLn.Addr().String())
		if err != nil {
			in.Close()
			return
		}
		go io.Copy(in, out)
		buf := make([]byte, 1<<16)
		seen := 0
		handshake := 4 + nonceLen + proofLen
		for {
			n, err := in.Read(buf)
			if n > 0 {
				for i := range n {
					if seen+i == handshake+4+2 {
						buf[i] ^= 0x01
					}
				}
				seen += n
				out.Write(buf[:n])
			}
			if err != nil {
				out.Close()
				return
			}
		}
	}()
	acc := make(chan net.Conn, 1)
	go func() {
		nc, err := masterLn.Accept()
		if err != nil {
			acc <- nil
			return
		}
		c, _ := GatewayAccept(nc, [][]byte{key}, nil)
		acc <- c
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := GatewayDial(nc, key, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m := <-acc
	if m == nil {
		t.Fatal("master handshake failed")
	}
	defer m.Close()
	s.Write([]byte("put orders 0 5 0 1\r\nhello\r\n"))
	m.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(m)
	if !errors.Is(err, ErrAuth) || bytes.Contains(got, []byte("put")) {
		t.Fatalf("read %q, %v: want nothing and ErrAuth", got, err)
	}
}
