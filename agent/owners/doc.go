// Package owners attributes BPF programs to whoever keeps them alive: the
// processes holding a program or link fd (from /proc/PID/fd and fdinfo, or
// from any other Source such as a task_file BPF iterator), bpffs pins, and
// attachments that no process holds (cgroup programs found with
// BPF_PROG_QUERY, XDP, tc and tcx programs on network interfaces).
//
// The package imports nothing of the agent: agent imports owners, and the
// Owner type here is the one owner type (agent.Owner is an alias of it).
//
// Use:
//
//	s := owners.NewScanner(cfg.ProcRoot, nil) // nil: walk /proc; or a task_file Source
//	res, err := s.Scan(nil)                   // res.Programs[progID] []Owner, res.Links[linkID] []pid
//	// or, beside a read that opens programs by id: s.WalkOthers(), the read, s.Finish(nil)
//	pins, _ := owners.ScanPins(cfg.BPFFS, owners.PinOptions{})
//	byProg := owners.PinsByProg(pins)
//	cg, _ := owners.CgroupV2Mount()
//	atts, _ := owners.CgroupAttachments(cg, owners.CgroupOptions{ProgTypes: unownedTypes})
//	nets, _ := owners.NetdevAttachments()
//
// A Scanner is meant to live as long as the agent: it caches per-process
// facts and each program's owners between scans and reuses its buffers
// and maps, so a Result is valid until the next Scan; a program whose
// owners did not change keeps the very slice it had (see Scanner.Scan).
package owners
