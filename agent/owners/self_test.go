package owners

import (
	"os"
	"testing"

	"github.com/cilium/ebpf"
)

// otherSource is a Source that is no ProcSource: the Scanner drops this
// process's holdings from its answer rather than skipping it in the walk.
type otherSource struct{ Source }

// WalkOthers leaves this process out and Finish adds what it holds then:
// a program it opened by id only while the walk ran (as the agent's read
// does) is not its, one it held throughout is, each beside a child
// holding it. With the /proc walk and with another source.
func TestWalkOthersThenFinish(t *testing.T) {
	passing, passingID := loadProg(t, ebpf.SocketFilter)
	kept, keptID := loadProg(t, ebpf.SocketFilter)
	child := startHolder(t, passing).Process.Pid
	passing.Close() // the child alone holds it from here
	childKept := startHolder(t, kept).Process.Pid
	self := os.Getpid()
	for _, c := range []struct {
		name string
		src  Source
	}{{"proc", nil}, {"other", otherSource{NewProcSource("")}}} {
		t.Run(c.name, func(t *testing.T) {
			s := NewScanner("", c.src)
			open, err := ebpf.NewProgramFromID(ebpf.ProgramID(passingID))
			if err != nil {
				t.Fatal(err)
			}
			s.WalkOthers()
			open.Close() // the read closes its fd before Finish
			r, err := s.Finish(nil)
			if err != nil {
				t.Fatal(err)
			}
			if o := r.Programs[passingID]; len(o) != 1 || o[0].PID != child {
				t.Errorf("program %d, open in this process (%d) during the walk only: owners %+v, want the child %d alone", passingID, self, o, child)
			}
			o := r.Programs[keptID]
			if len(o) != 2 || ownerByPID(o, self) == nil || ownerByPID(o, childKept) == nil || o[0].PID > o[1].PID {
				t.Errorf("program %d, held by this process (%d) and the child %d: owners %+v, want both in pid order", keptID, self, childKept, o)
			}
			if _, err := s.Finish(nil); err == nil {
				t.Error("a second Finish without WalkOthers answered")
			}
			// A Scan sees this process as it is.
			if r, err = s.Scan(nil); err != nil || ownerByPID(r.Programs[keptID], self) == nil {
				t.Errorf("Scan after Finish: owners of %d %+v (%v), want this process among them", keptID, r.Programs[keptID], err)
			}
		})
	}
}
