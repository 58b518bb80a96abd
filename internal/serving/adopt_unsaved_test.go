package serving

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/shoal-run/shoal/internal/store"
)

// A daemon killed before its store writer saved a new replica's start
// (the record still pending: no address, no PID) while the replica was
// already ready: the next daemon adopts the running replica with the
// address the node tells, and neither kills nor replaces it.
func TestAdoptReplicaSavedBeforeItsStart(t *testing.T) {
	h := newHarness(t)
	h.deploy("min = 1")
	h.wait("ready", func() bool { return len(h.replicas()[StateReady]) == 1 })
	id := h.replicas()[StateReady][0]
	h.m.Close()
	ctx := context.Background()
	key := store.ReplicaKey("hello", id)
	var rec replicaRecord
	getJSON(t, h.m.o.Store, key, &rec)
	addr := rec.Addr
	// What the writer stored first, when the replica was decided on.
	rec.State, rec.Addr, rec.Pid, rec.CPUSet, rec.ReadyAt = StatePending, "", 0, "", nil
	b, _ := json.Marshal(rec)
	if _, err := h.m.o.Store.Put(ctx, key, b); err != nil {
		t.Fatal(err)
	}
	h.restart()
	h.advanceUntil("the replica ready again", tick, func() bool { return len(h.replicas()[StateReady]) == 1 })
	if got := h.replicas(); len(got) != 1 || len(got[StateReady]) != 1 || got[StateReady][0] != id || !h.running(id) {
		t.Fatalf("after the restart: replicas %v, %s running %v; want %s adopted and ready", got, id, h.running(id), id)
	}
	if eps := h.r.route("hello").Endpoints; len(eps) != 1 || eps[0].ID != id || eps[0].Addr != addr {
		t.Fatalf("route after the restart: %+v; want %s at %s", eps, id, addr)
	}
	h.written()
	getJSON(t, h.m.o.Store, key, &rec)
	if rec.Addr != addr || rec.State != StateReady || rec.Pid == 0 {
		t.Errorf("stored after the restart: %+v; want ready at %s with its PID", rec, addr)
	}
}
