package siterole

import (
	"errors"
	"sync"
	"testing"
)

func TestMachineOneTransitionAtATime(t *testing.T) {
	m := New(State{Role: Slave, SlaveID: 1})
	end, err := m.Begin(Promoting)
	if err != nil {
		t.Fatal(err)
	}
	var busy *ErrBusy
	if _, err := m.Begin(Demoting); !errors.As(err, &busy) || busy.Running != Promoting {
		t.Fatalf("second Begin = %v, want ErrBusy{Promoting}", err)
	}
	if st, busy := m.CurrentAndBusy(); st.Role != Slave || busy != Promoting {
		t.Fatalf("CurrentAndBusy = %v, %q; want the slave, promoting", st, busy)
	}
	changed := m.Changed()
	m.Set(State{Role: Master, Generation: 1})
	select {
	case <-changed:
	default:
		t.Fatal("Set did not signal a change")
	}
	end()
	end() // idempotent
	if m.Busy() != None {
		t.Fatalf("Busy = %q after end", m.Busy())
	}
	if s := m.Current(); !s.IsMaster() || s.Generation != 1 {
		t.Fatalf("Current = %v", s)
	}
	m.Close()
	if _, err := m.Begin(Promoting); err == nil {
		t.Fatal("Begin after Close succeeded")
	}
}

func TestMachineStepDown(t *testing.T) {
	m := New(State{Role: Master, Generation: 2})
	if m.StepDown(2, "same") {
		t.Fatal("stepped down for its own generation")
	}
	if !m.StepDown(3, "generation 3 in ZooKeeper") || m.Current().IsMaster() {
		t.Fatalf("StepDown(3): %v", m.Current())
	}
	if m.StepDown(4, "again") {
		t.Fatal("stepped down twice")
	}
	s := New(State{Role: Slave})
	if s.StepDown(9, "x") {
		t.Fatal("a slave stepped down")
	}
}

func TestMachineConcurrentReaders(t *testing.T) {
	m := New(State{Role: Master})
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 200; j++ {
				_ = m.Current()
				_ = m.Busy()
			}
		}()
	}
	for j := 0; j < 200; j++ {
		if end, err := m.Begin(Demoting); err == nil {
			m.Set(State{Role: Slave, SlaveID: j})
			end()
		}
	}
	wg.Wait()
}
