package owners_test

import (
	"testing"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/agent/owners"
)

// agent.Owner is owners.Owner, not a second type to convert to: this stops
// compiling the day agent defines an owner type of its own again.
func TestAgentOwnerIsOwnersOwner(t *testing.T) {
	o := owners.Owner{PID: 7, Comm: "c", Exe: "/e", Cgroup: "/g", ContainerID: "id", Runtime: "docker", PodUID: "u", Via: owners.ViaLink}
	var a agent.Owner = o
	if a.PID != 7 || a.Comm != "c" || a.Exe != "/e" || a.Cgroup != "/g" || a.ContainerID != "id" || a.Runtime != "docker" || a.PodUID != "u" || a.Via != "link" {
		t.Errorf("converted owner %+v lost fields of %+v", a, o)
	}
}
