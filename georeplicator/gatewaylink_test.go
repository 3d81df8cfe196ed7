package georeplicator

import (
	"bufio"
	"bytes"
	"context"
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

// TestGatewayLinksSupersede: a master serving links through GatewayLinks
// ends the reads of a gateway's link when the gateway opens a newer one
// (the older link's reader sees EOF, bytes written on it later are never
// read), serves the newer one only once the older one is released, and
// refuses a link whose epoch is not above the newest it admitted, naming
// that epoch: the slave's next link goes above it. Anonymous (version 1)
// links are served alongside, untouched.
func TestGatewayLinksSupersede(t *testing.T) {
	key := []byte("0123456789abcdef0123")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var links GatewayLinks
	type accepted struct {
		c       net.Conn
		release func()
		err     error
	}
	acc := make(chan accepted, 4)
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				c, release, err := links.Accept(nc, [][]byte{key}, nil)
				if err != nil {
					nc.Close()
				} else {
					t.Cleanup(func() { c.Close() })
				}
				acc <- accepted{c, release, err}
			}()
		}
	}()
	dial := func(id GatewayIdentity) (net.Conn, error) {
		t.Helper()
		nc, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c, err := gatewayDial(context.Background(), nc, key, true, nil, id)
		if err == nil {
			t.Cleanup(func() { c.Close() })
		}
		return c, err
	}
	readLine := func(c net.Conn) (string, error) {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 64)
		n, err := c.Read(buf)
		return string(buf[:n]), err
	}

	s1, err := GatewayDialAs(mustDial(t, ln.Addr().String()), key, true, nil, "hf/0")
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close()
	a1 := <-acc
	if a1.err != nil {
		t.Fatal(a1.err)
	}
	if id, ok := GatewayLinkName(a1.c); !ok || id.Name != "hf/0" {
		t.Fatalf("link name %+v %v", id, ok)
	}
	s1.Write([]byte("one"))
	if got, err := readLine(a1.c); got != "one" || err != nil {
		t.Fatalf("read %q %v", got, err)
	}
	anon, err := dial(GatewayIdentity{})
	if err != nil {
		t.Fatal(err)
	}
	aAnon := <-acc
	if _, named := GatewayLinkName(aAnon.c); aAnon.err != nil || named {
		t.Fatalf("anonymous link: %v, named %v", aAnon.err, named)
	}

	// A newer link of hf/0: the older one's reads end, and the newer one is
	// handed over only once the older one is released.
	s2, err := GatewayDialAs(mustDial(t, ln.Addr().String()), key, true, nil, "hf/0")
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if got, err := readLine(a1.c); got != "" || err != io.EOF {
		t.Fatalf("superseded link read %q %v, want EOF", got, err)
	}
	s1.Write([]byte("late"))
	if got, err := readLine(a1.c); got != "" || err != io.EOF {
		t.Fatalf("superseded link read %q %v after a late write, want EOF", got, err)
	}
	select {
	case a := <-acc:
		t.Fatalf("newer link handed over before the older one was released: %v", a.err)
	case <-time.After(50 * time.Millisecond):
	}
	a1.release()
	a2 := <-acc
	if a2.err != nil {
		t.Fatal(a2.err)
	}
	s2.Write([]byte("two"))
	if got, err := readLine(a2.c); got != "two" || err != nil {
		t.Fatalf("read %q %v", got, err)
	}
	anon.Write([]byte("anon"))
	if got, err := readLine(aAnon.c); got != "anon" || err != nil {
		t.Fatalf("anonymous link read %q %v", got, err)
	}

	// An older epoch is refused, naming the newest; the next link goes
	// above it.
	id2, _ := GatewayLinkName(a2.c)
	_, err = dial(GatewayIdentity{Name: "hf/0", Epoch: id2.Epoch})
	if err == nil || !strings.Contains(err.Error(), gatewayStaleMark+fmt.Sprint(id2.Epoch)) {
		t.Fatalf("a link with the newest link's epoch: %v, want refused as stale", err)
	}
	if a := <-acc; a.err == nil {
		t.Fatal("master admitted a stale epoch")
	}
	if s2.(*gatewayConn).superseded.Load() || a2.c.(*gatewayConn).superseded.Load() {
		t.Fatal("a refused link superseded the newest")
	}
	// A previous process whose clock ran ahead left a higher epoch for
	// hf/1: this process's first link there is refused, its next one
	// goes above it and is admitted.
	ahead := uint64(time.Now().Add(time.Hour).UnixNano())
	if _, err := dial(GatewayIdentity{Name: "hf/1", Epoch: ahead}); err != nil {
		t.Fatal(err)
	}
	if a := <-acc; a.err != nil {
		t.Fatal(a.err)
	} else {
		a.release()
	}
	if _, err := GatewayDialAs(mustDial(t, ln.Addr().String()), key, true, nil, "hf/1"); err == nil || !strings.Contains(err.Error(), gatewayStaleMark) {
		t.Fatalf("a link below the previous process's epoch: %v, want refused as stale", err)
	}
	<-acc
	s3, err := GatewayDialAs(mustDial(t, ln.Addr().String()), key, true, nil, "hf/1")
	if err != nil {
		t.Fatalf("the link after a stale refusal: %v", err)
	}
	defer s3.Close()
	a3 := <-acc
	if id, _ := GatewayLinkName(a3.c); a3.err != nil || id.Epoch <= ahead {
		t.Fatalf("the link after a stale refusal: %v, epoch %d, want above %d", a3.err, id.Epoch, ahead)
	}
	a3.release()
}

func mustDial(t *testing.T, addr string) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return nc
}

// TestGatewayDialAsOldMaster: a master that knows only version 1 hellos
// refuses a named one as an unknown version; GatewayDialAs reports it as
// ErrGatewayVersion (the bundle then dials version 1).
func TestGatewayDialAsOldMaster(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		// Version 1's master: the mode byte pair, then the hello, refused.
		io.ReadFull(nc, make([]byte, 2+2+nonceLen))
		msg := "unknown gateway version 2"
		nc.Write(append([]byte{1, byte(len(msg))}, msg...))
	}()
	_, err = GatewayDialAs(mustDial(t, ln.Addr().String()), nil, true, nil, "hf/0")
	if !errors.Is(err, ErrGatewayVersion) {
		t.Fatalf("dial: %v, want ErrGatewayVersion", err)
	}
}

// TestGatewayDialContextFrozenMaster: a master that accepts TCP and never
// answers the handshake (a paused process) holds GatewayDialContext only
// until its context is canceled or its deadline passes, not for the
// handshake's own bound.
func TestGatewayDialContextFrozenMaster(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- nc // read nothing, answer nothing
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		for nc := range accepted {
			nc.Close()
		}
	})
	const bound = gatewayHandshakeTimeout / 2
	t.Run("canceled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(100*time.Millisecond, cancel)
		began := time.Now()
		_, err := GatewayDialAsContext(ctx, mustDial(t, ln.Addr().String()), nil, true, nil, "gz/1")
		if took := time.Since(began); err == nil || !errors.Is(err, context.Canceled) || took > bound {
			t.Fatalf("dial canceled after 100ms: %v after %v", err, took)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		began := time.Now()
		_, err := GatewayDialContext(ctx, mustDial(t, ln.Addr().String()), nil, true, nil)
		if took := time.Since(began); err == nil || took > bound {
			t.Fatalf("dial with a 200ms deadline: %v after %v", err, took)
		}
	})
}
