// Command kernels runs bpfleet's kernel tests in real Debian kernels booted
// under qemu (TCG) and prints a table kernel × test.
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	kernels := flag.String("kernels", os.Getenv("KERNELS"), "comma separated entries to run (default: all)")
	fetchOnly := flag.Bool("fetch-only", false, "only download the kernels")
	flag.Parse()
	entries, err := selectEntries(*kernels)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kernels:", err)
		os.Exit(2)
	}
	logf := func(f string, a ...any) { fmt.Fprintf(os.Stderr, "kernels: "+f+"\n", a...) }
	for _, e := range entries {
		k, err := FetchKernel(e, logf)
		if err != nil {
			logf("%s: %v", e.Name, err)
			os.Exit(1)
		}
		logf("%s: %s %s at %s (cached %v)", e.Name, k.Package, k.Version, k.Image, k.Cached)
	}
	_ = fetchOnly
}
