package georeplicator

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// gatewayPair runs GatewayDial and GatewayAccept over a TCP loopback pair,
// the master consuming the first byte as the broker's sniffing leaves it
// (peeked, not read: GatewayAccept reads it).
func gatewayPair(t *testing.T, slaveSecret []byte, masterSecrets [][]byte, compress bool) (slave, master net.Conn, slaveErr, masterErr error) {
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
		c, err := GatewayAccept(nc, masterSecrets)
		if err != nil {
			nc.Close()
		}
		ch <- res{c, err}
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	slave, slaveErr = GatewayDial(nc, slaveSecret, compress)
	if slaveErr != nil {
		nc.Close()
	}
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
	}{{"plain", nil, false}, {"zstd", nil, true}, {"secret", key, false}, {"secret+zstd", key, true}} {
		t.Run(tc.name, func(t *testing.T) {
			var secrets [][]byte
			if tc.secret != nil {
				secrets = [][]byte{[]byte("an-older-secret-0000"), tc.secret}
			}
			s, m, serr, merr := gatewayPair(t, tc.secret, secrets, tc.compress)
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
// the slave has one.
func TestGatewayLinkAuth(t *testing.T) {
	a, b := []byte("secret-a-0123456789"), []byte("secret-b-0123456789")
	for _, tc := range []struct {
		name   string
		slave  []byte
		master [][]byte
	}{{"wrong secret", a, [][]byte{b}}, {"slave without", nil, [][]byte{b}}, {"master without", a, nil}} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, serr, merr := gatewayPair(t, tc.slave, tc.master, true)
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
		handshake := 3 + nonceLen + proofLen
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
		c, _ := GatewayAccept(nc, [][]byte{key})
		acc <- c
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := GatewayDial(nc, key, false)
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
