package config

import (
	"strings"
	"testing"
)

func TestStripSecrets(t *testing.T) {
	in := "[system]\r\nbrokerId=1\r\ntoken=not-a-secret-here\r\n\r\n[site]\r\nname = bj\r\n  Token = s3cr3t-dashboard\r\n; token=commented\r\n" +
		"[gossip]\nkey: c2VjcmV0LWdvc3NpcC1rZXkxMg==\nlabel=x\n[topic=t]\nnumPartitions=1"
	want := "[system]\r\nbrokerId=1\r\ntoken=not-a-secret-here\r\n\r\n[site]\r\nname = bj\r\n; token=commented\r\n" +
		"[gossip]\nlabel=x\n[topic=t]\nnumPartitions=1"
	if got := string(StripSecrets([]byte(in))); got != want {
		t.Fatalf("got\n%q\nwant\n%q", got, want)
	}
	plain := []byte("[system]\nbrokerId=1\n")
	if got := StripSecrets(plain); &got[0] != &plain[0] {
		t.Fatal("bytes without secrets were copied")
	}
}

func TestSecretKeysIn(t *testing.T) {
	got := SecretKeysIn([]byte("[site]\ntoken=x\n[gossip]\nlabel=l\nkey=k\n[system]\ntoken=y\n"))
	if len(got) != 2 || got[0] != "[site] token" || got[1] != "[gossip] key" {
		t.Fatalf("got %q", got)
	}
	if got := SecretKeysIn([]byte("[site]\nname=bj\n")); got != nil {
		t.Fatalf("got %q", got)
	}
}

// Load errors and warnings end up in logs: they never quote a secret.
func TestProblemsHideSecrets(t *testing.T) {
	base := "[system]\nbrokerId=1\nnumPartitions=1\nunflushThreshold=0\nunflushInterval=1000\nmaxSegmentSize=1048576\nmaxTransferSize=1048576\n[zookeeper]\nzk.zkEnable=false\n[topic=t]\n"
	_, _, err := Parse("x.ini", []byte(base+"[gossip]\nkey=not-base64-s3cr3t\n"))
	if err == nil || strings.Contains(err.Error(), "s3cr3t") || !strings.Contains(err.Error(), "[gossip] key") {
		t.Fatalf("error %v", err)
	}
	_, warns, err := Parse("x.ini", []byte(base+"[site]\ntoken=first-s3cr3t\ntoken=second-s3cr3t\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range warns {
		if strings.Contains(w.String(), "s3cr3t") {
			t.Fatalf("warning quotes the token: %s", w)
		}
	}
}
