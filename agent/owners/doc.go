// Package owners attributes BPF programs to whoever keeps them alive: the
// processes holding a program or link fd (from /proc/PID/fd and fdinfo, or
// from any other Source such as a task_file BPF iterator), bpffs pins, and
// attachments that no process holds (cgroup programs found with
// BPF_PROG_QUERY, XDP and tcx programs on network interfaces).
//
// The package imports nothing of the agent: agent imports owners, so the
// Owner type here mirrors agent.Owner field for field and converts with a
// plain type conversion, agent.Owner(o).
package owners
