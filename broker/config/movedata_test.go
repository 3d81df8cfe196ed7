package config

import "testing"

// TestMoveData: the -data override moves the transaction journal with the
// store unless dataLogPath names a directory of its own.
func TestMoveData(t *testing.T) {
	cases := []struct {
		name              string
		dataPath, logPath string
		dir               string
		wantData, wantLog string
	}{
		{"journal defaulted to dataPath moves", "/srv/meta", "/srv/meta", "/x", "/x", "/x"},
		{"journal unset moves", "/srv/meta", "", "/x", "/x", "/x"},
		{"same directory written differently moves", "/srv/meta", "/srv/meta/", "/x", "/x", "/x"},
		{"journal of its own stays", "/srv/meta", "/srv/txlog", "/x", "/x", "/srv/txlog"},
		{"no override changes nothing", "/srv/meta", "/srv/meta", "", "/srv/meta", "/srv/meta"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := System{DataPath: c.dataPath, DataLogPath: c.logPath}
			s.MoveData(c.dir)
			if s.DataPath != c.wantData || s.DataLogPath != c.wantLog {
				t.Fatalf("MoveData(%q): dataPath %q dataLogPath %q, want %q %q", c.dir, s.DataPath, s.DataLogPath, c.wantData, c.wantLog)
			}
		})
	}
}
