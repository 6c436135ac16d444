package agent

import "testing"

func TestCapEff(t *testing.T) {
	for _, c := range []struct {
		status string
		want   uint64
		ok     bool
	}{
		{"Name:\tbpfleet\nCapInh:\t0000000000000000\nCapEff:\t000000c000280004\nCapBnd:\t000000c000280004\n", 0xc000280004, true},
		{"CapEff:\t000001ffffffffff\n", 0x1ffffffffff, true},
		{"CapEff:\tzz\n", 0, false},
		{"Name:\tx\n", 0, false},
	} {
		got, ok := capEff(c.status)
		if got != c.want || ok != c.ok {
			t.Errorf("capEff(%q) = %#x, %v; want %#x, %v", c.status, got, ok, c.want, c.ok)
		}
	}
}
