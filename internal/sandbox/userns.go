package sandbox

import (
	"fmt"
	"math"
	"sync"

	"github.com/shoal-run/shoal/internal/runtime"
)

// tenantIDs hands each tenant a range of host ids of its own, in the
// order tenants first run a job. Nothing a tenant's sandbox owns outlives
// its job (work directories are tmpfs, containers ephemeral), so the
// ranges need not survive a restart of the daemon.
type tenantIDs struct {
	mu   sync.Mutex
	next uint32
	of   map[string]uint32 // tenant → index of its range
}

// userNS is the user namespace tenant's sandboxes run in: the tenant's own
// range of s.UserNS.Size host ids, the first tenant's starting at
// s.UserNS.HostID. nil without user namespaces.
func (s *Sandbox) userNS(tenant string) (*runtime.UserNS, error) {
	base := s.UserNS
	if base == nil {
		return nil, nil
	}
	t := &s.ids
	t.mu.Lock()
	defer t.mu.Unlock()
	i, ok := t.of[tenant]
	if !ok {
		i = t.next
	}
	host := uint64(base.HostID) + uint64(i)*uint64(base.Size)
	// The last id of a range must stay below the kernel's invalid id (2^32-1).
	if base.Size == 0 || host+uint64(base.Size) > math.MaxUint32 {
		return nil, fmt.Errorf("tenant %q: no range of %d host ids left for its user namespace", tenant, base.Size)
	}
	if !ok {
		if t.of == nil {
			t.of = map[string]uint32{}
		}
		t.of[tenant] = i
		t.next++
	}
	return &runtime.UserNS{HostID: uint32(host), Size: base.Size}, nil
}
