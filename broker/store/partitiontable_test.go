package store

import (
	"context"
	"fmt"
	"sync"
	"testing"
)

// TestAppendManyPartitionTable: AppendManyAsync finds its partitions by
// topic and number (topicParts), and the writer appends to what it found.
// That table must follow the partition table through a delete (a deleted
// partition found there would take the appends of its successor), a
// re-creation, partition numbers it does not index, and a reopen.
func TestAppendManyPartitionTable(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, Options{Dir: dir})
	ctx := context.Background()
	many := func(s *Store, apps ...PartitionAppend) {
		t.Helper()
		got := make(chan []AppendOutcome, 1)
		s.AppendManyAsync(ctx, apps, func(o []AppendOutcome) { got <- o })
		for i, o := range <-got {
			if o.Err != nil {
				t.Fatalf("append %d (%s-%d): %v", i, apps[i].Topic, apps[i].Partition, o.Err)
			}
		}
	}
	one := func(topic string, part int, body string) PartitionAppend {
		return PartitionAppend{Topic: topic, Partition: part, Msgs: []Message{{Body: []byte(body)}}}
	}
	bodies := func(s *Store, topic string, part int) []string {
		t.Helper()
		var out []string
		for _, r := range decodeAll(t, readAll(t, s, topic, part)) {
			out = append(out, string(r.Body))
		}
		return out
	}
	want := func(s *Store, topic string, part int, w ...string) {
		t.Helper()
		if got := bodies(s, topic, part); len(got) != len(w) || (len(w) > 0 && got[len(got)-1] != w[len(w)-1]) || (len(w) > 0 && got[0] != w[0]) {
			t.Fatalf("%s-%d holds %q, want %q", topic, part, got, w)
		}
	}
	big := maxIndexedNum + 5
	many(s, one("w", 3, "a"), one("w", 0, "b"), one("v", 3, "c"), one("w", big, "d"))
	checkTopicParts(t, s)
	if err := s.DeletePartition("w", 3); err != nil {
		t.Fatal(err)
	}
	checkTopicParts(t, s)
	many(s, one("w", 3, "e"), one("w", big, "f"))
	checkTopicParts(t, s)
	want(s, "w", 3, "e")
	want(s, "w", 0, "b")
	want(s, "v", 3, "c")
	want(s, "w", big, "d", "f")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openT(t, Options{Dir: dir})
	checkTopicParts(t, s2)
	many(s2, one("w", 3, "g"), one("v", 3, "h"))
	want(s2, "w", 3, "e", "g")
	want(s2, "v", 3, "c", "h")
}

// checkTopicParts checks that s.byTopic holds exactly the partitions of
// s.parts it indexes.
func checkTopicParts(t *testing.T, s *Store) {
	t.Helper()
	s.mu.RLock()
	defer s.mu.RUnlock()
	indexed := 0
	for key, p := range s.parts {
		if key.num >= maxIndexedNum {
			continue
		}
		indexed++
		if got := s.byTopic[key.topic].get(key.num); got != p {
			t.Errorf("%s-%d: the table by topic has %p, the partition table %p", key.topic, key.num, got, p)
		}
	}
	listed := 0
	for topic, tp := range s.byTopic {
		n := 0
		for num, p := range tp.byNum {
			if p == nil {
				continue
			}
			n++
			if s.parts[pkey{topic, num}] != p {
				t.Errorf("%s-%d is in the table by topic only", topic, num)
			}
		}
		if tp.topic != topic || n != tp.n || n == 0 {
			t.Errorf("topic %q: entry of %q counts %d partitions, holds %d", topic, tp.topic, tp.n, n)
		}
		listed += n
	}
	if listed != indexed {
		t.Errorf("table by topic lists %d partitions, the partition table %d below %d", listed, indexed, maxIndexedNum)
	}
}

// TestAppendManyConcurrentCalls: AppendManyAsync calls from several
// goroutines at once, each spread over many partitions (their part
// requests are reused from call to call once answered): every answered
// offset holds the record sent with the id answered, and every partition
// holds exactly what was answered for it, in the order answered.
func TestAppendManyConcurrentCalls(t *testing.T) {
	s := openT(t, Options{})
	const writers, calls, perCall, partitions = 4, 150, 24, 40
	ctx := context.Background()
	type answer struct {
		part int
		body string
		a    Appended
	}
	answers := make([][]answer, writers)
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inflight := make(chan struct{}, 8)
			var mu sync.Mutex
			var cwg sync.WaitGroup
			for c := 0; c < calls; c++ {
				apps := make([]PartitionAppend, perCall)
				bodies := make([]string, perCall)
				for k := range apps {
					part := (w*7 + c*perCall + k) % partitions
					bodies[k] = fmt.Sprintf("w%d-c%d-k%d", w, c, k)
					apps[k] = PartitionAppend{Topic: "many", Partition: part, Msgs: []Message{{Body: []byte(bodies[k])}}}
				}
				inflight <- struct{}{}
				cwg.Add(1)
				s.AppendManyAsync(ctx, apps, func(outs []AppendOutcome) {
					defer cwg.Done()
					defer func() { <-inflight }()
					mu.Lock()
					defer mu.Unlock()
					for k, o := range outs {
						if o.Err != nil || len(o.Appended) != 1 {
							t.Errorf("writer %d call %d part %d: %+v", w, c, k, o)
							continue
						}
						answers[w] = append(answers[w], answer{apps[k].Partition, bodies[k], o.Appended[0]})
					}
				})
			}
			cwg.Wait()
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	byPart := make(map[int]map[int64]answer)
	for _, as := range answers {
		for _, a := range as {
			if byPart[a.part] == nil {
				byPart[a.part] = make(map[int64]answer)
			}
			if prev, dup := byPart[a.part][a.a.Offset]; dup {
				t.Fatalf("partition %d offset %d answered twice: %q and %q", a.part, a.a.Offset, prev.body, a.body)
			}
			byPart[a.part][a.a.Offset] = a
		}
	}
	total := 0
	for part := 0; part < partitions; part++ {
		b := readAll(t, s, "many", part)
		off := int64(0)
		recs := 0
		for len(b) > 0 {
			r, n, err := DecodeRecord(b)
			if err != nil {
				t.Fatalf("partition %d at %d: %v", part, off, err)
			}
			a, ok := byPart[part][off]
			if !ok || string(r.Body) != a.body || r.ID != a.a.ID {
				t.Fatalf("partition %d at %d: record %q id %d, answered %+v (found %v)", part, off, r.Body, r.ID, a, ok)
			}
			b, off = b[n:], off+int64(n)
			recs++
		}
		if recs != len(byPart[part]) {
			t.Fatalf("partition %d: %d records, %d answered", part, recs, len(byPart[part]))
		}
		total += recs
	}
	if total != writers*calls*perCall {
		t.Fatalf("%d records stored, want %d", total, writers*calls*perCall)
	}
}
