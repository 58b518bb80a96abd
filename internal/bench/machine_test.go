package bench

import (
	"context"
	"strings"
	"testing"
)

func TestCollectMachine(t *testing.T) {
	m := CollectMachine(context.Background())
	if m.Cores < 1 || m.MemoryMiB <= 0 || m.Kernel == "" || m.Kernel == "unknown" {
		t.Fatalf("incomplete machine: %+v", m)
	}
	switch m.CgroupMode {
	case "v1", "v2", "hybrid":
	default:
		t.Fatalf("cgroup mode %q", m.CgroupMode)
	}
	md := m.Markdown()
	for _, want := range []string{"| kernel | " + m.Kernel, "| cgroups |", "| runc |", "| podman |", "| Go | go"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}
