package outbox

import (
	"testing"
	"time"
)

// TestOptionsValidate: Dir is required; zero values get the defaults and
// set values are kept.
func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      Options
		wantErr bool
		bytes   int64
		age     time.Duration
		seg     int64
	}{
		{name: "no directory", in: Options{MaxBytes: 1}, wantErr: true},
		{name: "defaults", in: Options{Dir: "d"}, bytes: DefaultMaxBytes, age: DefaultMaxAge, seg: DefaultSegmentBytes},
		{name: "negative means default", in: Options{Dir: "d", MaxBytes: -1, MaxAge: -time.Second, SegmentBytes: -1},
			bytes: DefaultMaxBytes, age: DefaultMaxAge, seg: DefaultSegmentBytes},
		{name: "set", in: Options{Dir: "d", MaxBytes: 300, MaxAge: time.Minute, SegmentBytes: 40}, bytes: 300, age: time.Minute, seg: 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.in
			err := o.validate()
			if (err != nil) != tc.wantErr {
				t.Fatalf("validate: %v, want error %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if o.MaxBytes != tc.bytes || o.MaxAge != tc.age || o.SegmentBytes != tc.seg || o.Now == nil || o.Logger == nil {
				t.Fatalf("validated %+v", o)
			}
		})
	}
}
