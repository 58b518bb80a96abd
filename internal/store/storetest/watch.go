package storetest

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/store"
)

func (s *suite) testWatchOrder(t *testing.T, st store.Store) {
	ch, err := st.Watch(ctx(t), "/w/")
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	other, err := st.Watch(ctx(t), "/x/")
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	r1 := put(t, st, "/w/a", "1")
	put(t, st, "/wx", "outside")
	put(t, st, "/x/1", "other prefix")
	r2 := put(t, st, "/w/b", "2")
	put(t, st, "/w/a", "3")
	if err := st.Delete(ctx(t), "/w/a"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := st.CompareAndSwap(ctx(t), "/w/b", r2, []byte("4")); err != nil {
		t.Fatalf("cas: %v", err)
	}
	// A last put proves nothing else was delivered in between.
	put(t, st, "/w/end", "")

	got := s.expect(t, ch, putEv("/w/a"), putEv("/w/b"), putEv("/w/a"), delEv("/w/a"), putEv("/w/b"), putEv("/w/end"))
	first := got[0].KV
	if first.ModRev != r1 || first.CreateRev != r1 || string(first.Value) != "1" {
		t.Fatalf("first event %+v, want value 1 at revision %d", first, r1)
	}
	if third := got[2].KV; third.CreateRev != r1 || string(third.Value) != "3" {
		t.Fatalf("update event %+v, want value 3 with create revision %d", third, r1)
	}
	if del := got[3].KV; len(del.Value) != 0 {
		t.Fatalf("delete event carries value %q", del.Value)
	}
	if cas := got[4].KV; string(cas.Value) != "4" {
		t.Fatalf("cas event %+v, want value 4", cas)
	}
	s.expect(t, other, putEv("/x/1"))
}

func (s *suite) testWatchStartsAfterCall(t *testing.T, st store.Store) {
	put(t, st, "/w/old", "before")
	ch, err := st.Watch(ctx(t), "/w/")
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	put(t, st, "/w/new", "after")
	s.expect(t, ch, putEv("/w/new"))
}

func (s *suite) testWatchCancel(t *testing.T, st store.Store) {
	c, cancel := context.WithCancel(ctx(t))
	ch, err := st.Watch(c, "/w/")
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	put(t, st, "/w/a", "1")
	s.expect(t, ch, putEv("/w/a"))
	cancel()
	timer := time.NewTimer(s.wait)
	defer timer.Stop()
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-timer.C:
			t.Fatalf("watch channel still open %s after its context ended", s.wait)
		}
	}
}

// expire lets the lease's TTL pass: on the store's clock, or in real time by
// simply waiting for the events that follow.
func (s *suite) expire(st store.Store) {
	if s.advance != nil {
		s.advance(st, s.ttl)
	}
}

// expectDeletes reads len(want) events and checks they delete exactly the
// keys in want, in any order (etcd deletes a lease's keys in one revision).
func (s *suite) expectDeletes(t *testing.T, ch <-chan store.Event, want ...string) {
	t.Helper()
	var got []string
	for range want {
		ev := s.recv(t, ch)
		if ev.Type != store.EventDelete {
			t.Fatalf("got %s %q, want a delete of one of %v", ev.Type, ev.KV.Key, want)
		}
		got = append(got, ev.KV.Key)
	}
	sort.Strings(got)
	sort.Strings(want)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("deleted %v, want %v", got, want)
		}
	}
}

func (s *suite) testLeaseExpiry(t *testing.T, st store.Store) {
	id, err := st.Grant(ctx(t), s.ttl)
	if err != nil {
		t.Fatalf("grant: %v", err)
	}
	put(t, st, "/l/a", "1", store.WithLease(id))
	if _, err := st.CompareAndSwap(ctx(t), "/l/b", 0, []byte("2"), store.WithLease(id)); err != nil {
		t.Fatalf("cas with lease: %v", err)
	}
	put(t, st, "/l/keep", "no lease")
	if kv := get(t, st, "/l/a"); kv.Lease != id {
		t.Fatalf("key put with lease %d reports lease %d", id, kv.Lease)
	}
	if kv := get(t, st, "/l/b"); kv.Lease != id {
		t.Fatalf("key swapped in with lease %d reports lease %d", id, kv.Lease)
	}
	if err := st.KeepAlive(ctx(t), id); err != nil {
		t.Fatalf("keepalive: %v", err)
	}
	ch, err := st.Watch(ctx(t), "/l/")
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	s.expire(st)
	s.expectDeletes(t, ch, "/l/a", "/l/b")
	for _, k := range []string{"/l/a", "/l/b"} {
		if _, err := st.Get(ctx(t), k); !errdefs.IsNotFound(err) {
			t.Fatalf("get %q after its lease expired: %v, want not found", k, err)
		}
	}
	get(t, st, "/l/keep")
	err = st.KeepAlive(ctx(t), id)
	wantErr(t, "keepalive of an expired lease", err, errNotFound, "lease")
}

func (s *suite) testLeaseRevoke(t *testing.T, st store.Store) {
	id, err := st.Grant(ctx(t), time.Minute)
	if err != nil {
		t.Fatalf("grant: %v", err)
	}
	put(t, st, "/l/a", "1", store.WithLease(id))
	put(t, st, "/l/b", "2", store.WithLease(id))
	ch, err := st.Watch(ctx(t), "/l/")
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	if err := st.Revoke(ctx(t), id); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	for _, k := range []string{"/l/a", "/l/b"} {
		if _, err := st.Get(ctx(t), k); !errdefs.IsNotFound(err) {
			t.Fatalf("get %q after revoke: %v, want not found", k, err)
		}
	}
	s.expectDeletes(t, ch, "/l/a", "/l/b")
	err = st.Revoke(ctx(t), id)
	wantErr(t, "second revoke", err, errNotFound, "lease")
}

// testLeaseDetach checks that a put without a lease takes a key off its
// lease, and that a put with a lease moves it there.
func (s *suite) testLeaseDetach(t *testing.T, st store.Store) {
	l1, err := st.Grant(ctx(t), time.Minute)
	if err != nil {
		t.Fatalf("grant: %v", err)
	}
	l2, err := st.Grant(ctx(t), time.Minute)
	if err != nil {
		t.Fatalf("grant: %v", err)
	}
	put(t, st, "/l/free", "1", store.WithLease(l1))
	put(t, st, "/l/free", "2")
	put(t, st, "/l/moved", "1", store.WithLease(l1))
	put(t, st, "/l/moved", "2", store.WithLease(l2))
	if err := st.Revoke(ctx(t), l1); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	if kv := get(t, st, "/l/free"); kv.Lease != 0 {
		t.Fatalf("detached key reports lease %d", kv.Lease)
	}
	if kv := get(t, st, "/l/moved"); kv.Lease != l2 {
		t.Fatalf("moved key reports lease %d, want %d", kv.Lease, l2)
	}
	if err := st.Revoke(ctx(t), l2); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	if _, err := st.Get(ctx(t), "/l/moved"); !errdefs.IsNotFound(err) {
		t.Fatalf("get moved key after its new lease was revoked: %v, want not found", err)
	}
}

func (s *suite) testLeaseErrors(t *testing.T, st store.Store) {
	const missing = store.LeaseID(987654321)
	_, err := st.Put(ctx(t), "/l/a", []byte("x"), store.WithLease(missing))
	wantErr(t, "put with missing lease", err, errNotFound, "/l/a")
	if _, err := st.Get(ctx(t), "/l/a"); !errdefs.IsNotFound(err) {
		t.Fatalf("a put with a missing lease wrote the key: %v", err)
	}
	err = st.KeepAlive(ctx(t), missing)
	wantErr(t, "keepalive of missing lease", err, errNotFound, "987654321")
	err = st.Revoke(ctx(t), missing)
	wantErr(t, "revoke of missing lease", err, errNotFound, "987654321")
	if _, err := st.Grant(ctx(t), 0); !errdefs.IsInvalid(err) {
		t.Fatalf("grant with ttl 0: %v, want invalid", err)
	}
}
