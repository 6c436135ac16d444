package progstats

import "testing"

func TestParsePossible(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
		err  bool
	}{
		{"0\n", 1, false},
		{"0-1\n", 2, false},
		{"0-127", 128, false},
		{"0,1-3", 4, false},
		{"0-3,4-7", 8, false},
		{"0-3,8-11", 0, true}, // a hole
		{"1-3", 0, true},      // no CPU 0
		{"3-1", 0, true},
		{"", 0, true},
		{"x", 0, true},
		{"0-", 0, true},
	} {
		got, err := parsePossible(c.in)
		if (err != nil) != c.err || got != c.want {
			t.Errorf("parsePossible(%q) = %d, %v; want %d, error %v", c.in, got, err, c.want, c.err)
		}
	}
}
