package fleetsim

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// BenchSizes are the fleet sizes the benches run (make bench BENCH=fleet):
// 100, 300 and 1,000 nodes, or those BPFLEET_FLEET_SIZES lists
// (comma separated).
func BenchSizes() ([]int, error) {
	s := os.Getenv("BPFLEET_FLEET_SIZES")
	if s == "" {
		return []int{100, 300, 1000}, nil
	}
	var sizes []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("BPFLEET_FLEET_SIZES=%q: %w", s, err)
		}
		sizes = append(sizes, n)
	}
	return sizes, nil
}
