// Command canary is the node test's BPF workload: run in a Deployment's
// pod, it loads the recursion canary (test/canary) and triggers it
// -per times every second, so the program it holds has known misses that
// bpfleet's agent must name by pod, namespace and Deployment. It prints its
// program's id and every trigger count, and exits 0 on SIGTERM or SIGINT.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/bpfleet/bpfleet/test/canary"
)

func main() {
	per := flag.Int("per", 5, "triggers (recursion misses) per second")
	flag.Parse()
	c, err := canary.Load()
	if err != nil {
		fmt.Fprintf(os.Stderr, "canary: %v\n", err)
		os.Exit(1)
	}
	defer c.Close()
	id, err := c.ProgramID()
	if err != nil {
		fmt.Fprintf(os.Stderr, "canary: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("canary loaded prog_id=%d pid=%d\n", id, os.Getpid())

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	total := 0
	for {
		select {
		case <-sigs:
			return
		case <-tick.C:
			if err := c.Trigger(*per); err != nil {
				fmt.Fprintf(os.Stderr, "canary: %v\n", err)
				os.Exit(1)
			}
			total += *per
			misses, _ := c.KernelMisses()
			fmt.Printf("triggered=%d misses=%d\n", total, misses)
		}
	}
}
