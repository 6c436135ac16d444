package main

import "github.com/bpfleet/bpfleet/agent"

// attachHelpers plugs the kernel-side helpers (bpf_prog iterator, owner
// resolver) into the agent where the kernel allows them.
func attachHelpers(a *agent.Agent, cfg agent.Config) {}
