package sandbox

import (
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/runtime"
)

// TestTenantUserNS: each tenant's sandboxes get host ids of their own, in
// the order tenants first run a job, the same range every time; without
// user namespaces there is none; past the last whole range below the
// kernel's invalid id a tenant is refused, naming it.
func TestTenantUserNS(t *testing.T) {
	sb := &Sandbox{}
	if ns, err := sb.userNS("a"); ns != nil || err != nil {
		t.Fatalf("without user namespaces: %v %v", ns, err)
	}
	sb.UserNS = &runtime.UserNS{HostID: 100000, Size: 65536}
	want := map[string]uint32{"a": 100000, "b": 165536, "c": 231072}
	for _, tenant := range []string{"a", "b", "a", "c", "b"} {
		ns, err := sb.userNS(tenant)
		if err != nil || ns.HostID != want[tenant] || ns.Size != 65536 {
			t.Fatalf("tenant %s: %+v %v, want host id %d", tenant, ns, err, want[tenant])
		}
	}
	full := &Sandbox{UserNS: &runtime.UserNS{HostID: 1<<32 - 3*65536, Size: 65536}}
	for _, tenant := range []string{"x", "y"} {
		if _, err := full.userNS(tenant); err != nil {
			t.Fatalf("tenant %s: %v", tenant, err)
		}
	}
	if _, err := full.userNS("z"); err == nil || !strings.Contains(err.Error(), `"z"`) {
		t.Fatalf("a tenant past the last range: %v", err)
	}
	if ns, err := full.userNS("x"); err != nil || ns.HostID != 1<<32-3*65536 {
		t.Fatalf("a tenant with a range after the ids ran out: %+v %v", ns, err)
	}
}
