package bench

import (
	"fmt"
	"io"
	"strings"
)

// WriteTable prints the results as a Markdown table shaped like the
// kernel developers' trig-* reports (attach type, M ops/s before and after,
// diff), plus the added ns per call, its spread over the rounds and the
// ratio to raw_tp. Unsupported attach types follow, one line each.
func WriteTable(w io.Writer, rep *Report) error {
	var b strings.Builder
	fmt.Fprintf(&b, "kernel %s %s, %s, trigger thread pinned to CPU %d\n\n", rep.Kernel.Release, rep.Kernel.Arch, rep.Kernel.CPUModel, rep.CPU)
	b.WriteString("| attach type | mode | stats | baseline M ops/s | with probe M ops/s | diff | added ns/op | spread ns/op | vs raw_tp |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	var refused []Result
	for _, r := range rep.Results {
		if !r.Supported {
			refused = append(refused, r)
			continue
		}
		ratio := "-"
		if r.RatioToRawTp > 0 {
			ratio = fmt.Sprintf("%.2fx", r.RatioToRawTp)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %.3f | %.3f | %+.2f%% | %.1f | %.1f..%.1f | %s |\n",
			r.AttachType, r.Mode, onOff(r.StatsEnabled), r.BaselineOpsPerSec/1e6, r.OpsPerSec/1e6, r.DiffPct,
			r.OverheadNs, r.OverheadNsMin, r.OverheadNsMax, ratio)
	}
	if len(refused) > 0 {
		b.WriteString("\nnot measured:\n")
		for _, r := range refused {
			fmt.Fprintf(&b, "  %-12s %s\n", r.AttachType, r.Reason)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}
