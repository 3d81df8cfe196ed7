package main

import (
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"metaq/broker/wire"
)

// The metaq-java peer starts whatever -metaq-java names; these tests give it
// this test binary, which (with standInEnv set) serves our broker on {port}
// until SIGTERM, as the Java broker would.
const standInEnv = "METAQ_BENCH_STAND_IN"

func TestMain(m *testing.M) {
	if spec := os.Getenv(standInEnv); spec != "" {
		os.Exit(runStandIn(spec))
	}
	os.Exit(m.Run())
}

// runStandIn serves a broker on the port of spec ("port topic partitions").
func runStandIn(spec string) int {
	f := strings.Fields(spec)
	if len(f) != 3 {
		fmt.Fprintln(os.Stderr, "stand-in: want port topic partitions, got", spec)
		return 2
	}
	parts, _ := strconv.Atoi(f[2])
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	_, stop, err := startBroker(options{topic: f[1], partitions: parts}, "127.0.0.1:"+f[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "stand-in:", err)
		return 1
	}
	fmt.Println("stand-in broker serving")
	<-term
	stop()
	return 0
}

func standInCmd(t *testing.T, o options) string {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("env %s='{port} %s %d' %s", standInEnv, o.topic, o.partitions, exe)
}

func TestMetaQJavaPeer(t *testing.T) {
	o := shortLoad(1)
	tg, err := startMetaQJava(o, standInCmd(t, o))
	if err != nil {
		t.Fatal(err)
	}
	res, err := runLoad(o, tg)
	if err != nil {
		tg.close()
		t.Fatal(err)
	}
	checkResult(t, "metaq-java", o, res)
	tg.close()
	// close waited for the process: nothing answers on its port any more.
	body := []byte("late")
	if err := putOnce(tg.addr, &wire.Put{Topic: o.topic, Checksum: wire.Checksum(body), Body: body}); err == nil {
		t.Errorf("%s still answers after close", tg.addr)
	}
}

func TestMetaQJavaPeerFailsClearly(t *testing.T) {
	o := shortLoad(0)
	if _, err := startMetaQJava(o, ""); err == nil || !strings.Contains(err.Error(), "-metaq-java") {
		t.Errorf("no command: got %v, want an error naming -metaq-java", err)
	}
	// A broker that dies at start: the error says so and shows its output.
	_, err := startMetaQJava(o, "echo no JVM here >&2; exit 3")
	if err == nil || !strings.Contains(err.Error(), "exited at start") || !strings.Contains(err.Error(), "no JVM here") {
		t.Errorf("dying broker: got %v", err)
	}
}
