package siterole

import (
	"strings"
	"testing"
)

func TestReclaimGivenBack(t *testing.T) {
	own := EnsembleGen{Site: "bj", Generation: 4, GivenBack: 5}
	hf := EnsembleGen{Site: "hf", Generation: 4}
	gz := EnsembleGen{Site: "gz", Generation: 3}
	base := GivenBackFacts{Generation: 5, Own: own, OwnRead: true, Others: []EnsembleGen{hf, gz}, Complete: true}
	with := func(mod func(*GivenBackFacts)) GivenBackFacts {
		f := base
		f.Others = append([]EnsembleGen(nil), base.Others...)
		mod(&f)
		return f
	}
	for _, tc := range []struct {
		name string
		f    GivenBackFacts
		ok   bool
		from uint64
		why  string
	}{
		{"given back everywhere, marked in the own ensemble", base, true, 4, "was given back (marked in site bj's"},
		{"marked in another site's ensemble", with(func(f *GivenBackFacts) { f.Own.GivenBack = 0; f.Others[1].GivenBack = 5 }), true, 4, "marked in site gz's"},
		{"not marked anywhere", with(func(f *GivenBackFacts) { f.Own.GivenBack = 0 }), false, 0, "no ZooKeeper ensemble marks generation 5"},
		{"marked for an older give-back", with(func(f *GivenBackFacts) { f.Own.GivenBack = 4 }), false, 0, "no ZooKeeper ensemble marks"},
		{"an ensemble still holds it", with(func(f *GivenBackFacts) { f.Others[0].Generation = 5 }), false, 0, "site hf's ZooKeeper ensemble holds generation 5"},
		{"an ensemble holds a newer one", with(func(f *GivenBackFacts) { f.Others[1].Generation = 6 }), false, 0, "holds generation 6"},
		{"an ensemble not read", with(func(f *GivenBackFacts) { f.Complete = false }), false, 0, "not every site's ZooKeeper ensemble"},
		{"own ensemble not read", with(func(f *GivenBackFacts) { f.OwnRead = false }), false, 0, "own ZooKeeper ensemble could not be read"},
		{"gossip has a master of it", with(func(f *GivenBackFacts) { f.MasterOf = "gz" }), false, 0, "site gz is master of generation 5"},
		{"stepped down for nothing known", GivenBackFacts{OwnRead: true, Complete: true}, false, 0, "no generation"},
		{"one shared ensemble", GivenBackFacts{Generation: 1, Own: EnsembleGen{Site: "bj", GivenBack: 1}, OwnRead: true, Complete: true}, true, 0, "given back"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, from, why := ReclaimGivenBack(tc.f)
			if ok != tc.ok || from != tc.from || !strings.Contains(why, tc.why) {
				t.Fatalf("ReclaimGivenBack = %v, %d, %q; want %v, %d, containing %q", ok, from, why, tc.ok, tc.from, tc.why)
			}
		})
	}
}
