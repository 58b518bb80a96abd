package storetest

import (
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/store"
)

func (s *suite) testPutGetDelete(t *testing.T, st store.Store) {
	rev := put(t, st, "/t/a", "one")
	kv := get(t, st, "/t/a")
	if string(kv.Value) != "one" || kv.Key != "/t/a" {
		t.Fatalf("get: got %q=%q, want /t/a=one", kv.Key, kv.Value)
	}
	if kv.ModRev != rev || kv.CreateRev != rev {
		t.Fatalf("get: revisions create=%d mod=%d, want both %d (the put's)", kv.CreateRev, kv.ModRev, rev)
	}
	if kv.Lease != 0 {
		t.Fatalf("get: lease %d on a key put without one", kv.Lease)
	}
	if err := st.Delete(ctx(t), "/t/a"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	_, err := st.Get(ctx(t), "/t/a")
	wantErr(t, "get after delete", err, errNotFound, "/t/a")
}

func (s *suite) testNotFound(t *testing.T, st store.Store) {
	_, err := st.Get(ctx(t), "/t/missing")
	wantErr(t, "get missing", err, errNotFound, "/t/missing")
	err = st.Delete(ctx(t), "/t/missing")
	wantErr(t, "delete missing", err, errNotFound, "/t/missing")
	kvs, err := st.List(ctx(t), "/t/")
	if err != nil || len(kvs) != 0 {
		t.Fatalf("list empty prefix: got %d keys, %v; want none", len(kvs), err)
	}
}

func (s *suite) testEmptyKey(t *testing.T, st store.Store) {
	_, err := st.Put(ctx(t), "", []byte("x"))
	if !errdefs.IsInvalid(err) {
		t.Fatalf("put empty key: got %v, want invalid", err)
	}
	_, err = st.CompareAndSwap(ctx(t), "", 0, []byte("x"))
	if !errdefs.IsInvalid(err) {
		t.Fatalf("cas empty key: got %v, want invalid", err)
	}
}

func (s *suite) testRevisionsIncrease(t *testing.T, st store.Store) {
	r1 := put(t, st, "/t/a", "1")
	r2 := put(t, st, "/t/b", "2")
	if err := st.Delete(ctx(t), "/t/a"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	r3 := put(t, st, "/t/b", "3")
	r4, err := st.CompareAndSwap(ctx(t), "/t/c", 0, []byte("4"))
	if err != nil {
		t.Fatalf("cas: %v", err)
	}
	if !(r1 < r2 && r2 < r3 && r3 < r4) {
		t.Fatalf("revisions %d, %d, %d, %d do not increase", r1, r2, r3, r4)
	}
	if r3 <= r2+1 {
		t.Fatalf("the delete between revisions %d and %d took no revision", r2, r3)
	}
}

func (s *suite) testCreateRevKept(t *testing.T, st store.Store) {
	r1 := put(t, st, "/t/a", "1")
	r2 := put(t, st, "/t/a", "2")
	kv := get(t, st, "/t/a")
	if kv.CreateRev != r1 || kv.ModRev != r2 || string(kv.Value) != "2" {
		t.Fatalf("after two puts: create=%d mod=%d value=%q, want create=%d mod=%d value=2",
			kv.CreateRev, kv.ModRev, kv.Value, r1, r2)
	}
	// Deleting and putting again starts a new life with a new CreateRev.
	if err := st.Delete(ctx(t), "/t/a"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	r3 := put(t, st, "/t/a", "3")
	if kv := get(t, st, "/t/a"); kv.CreateRev != r3 {
		t.Fatalf("recreated key: create=%d, want %d", kv.CreateRev, r3)
	}
}

func (s *suite) testList(t *testing.T, st store.Store) {
	for _, k := range []string{"/a/2", "/ab", "/a/3/x", "/a/1", "/b/1", "/a"} {
		put(t, st, k, "v"+k)
	}
	kvs, err := st.List(ctx(t), "/a/")
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	want := []string{"/a/1", "/a/2", "/a/3/x"}
	if len(kvs) != len(want) {
		t.Fatalf("list /a/: got %d keys %v, want %v", len(kvs), keys(kvs), want)
	}
	for i, kv := range kvs {
		if kv.Key != want[i] || string(kv.Value) != "v"+want[i] || kv.ModRev == 0 || kv.CreateRev == 0 {
			t.Fatalf("list /a/[%d]: got %q=%q (create %d, mod %d), want %q with revisions",
				i, kv.Key, kv.Value, kv.CreateRev, kv.ModRev, want[i])
		}
	}
}

func keys(kvs []store.KV) []string {
	var out []string
	for _, kv := range kvs {
		out = append(out, kv.Key)
	}
	return out
}

func (s *suite) testCASCreateOnly(t *testing.T, st store.Store) {
	rev, err := st.CompareAndSwap(ctx(t), "/t/lock", 0, []byte("me"))
	if err != nil {
		t.Fatalf("cas create: %v", err)
	}
	if kv := get(t, st, "/t/lock"); kv.ModRev != rev || kv.CreateRev != rev || string(kv.Value) != "me" {
		t.Fatalf("after cas create: %+v, want value me at revision %d", kv, rev)
	}
	_, err = st.CompareAndSwap(ctx(t), "/t/lock", 0, []byte("you"))
	wantErr(t, "cas create on existing key", err, errConflict, "/t/lock")
	if kv := get(t, st, "/t/lock"); string(kv.Value) != "me" {
		t.Fatalf("a failed cas changed the value to %q", kv.Value)
	}
}

func (s *suite) testCASSwap(t *testing.T, st store.Store) {
	r1 := put(t, st, "/t/a", "1")
	r2, err := st.CompareAndSwap(ctx(t), "/t/a", r1, []byte("2"))
	if err != nil {
		t.Fatalf("cas at current revision: %v", err)
	}
	kv := get(t, st, "/t/a")
	if r2 <= r1 || kv.ModRev != r2 || kv.CreateRev != r1 || string(kv.Value) != "2" {
		t.Fatalf("after cas: %+v (cas rev %d), want value 2, create %d, mod %d", kv, r2, r1, r2)
	}
}

func (s *suite) testCASConflict(t *testing.T, st store.Store) {
	r1 := put(t, st, "/t/a", "1")
	put(t, st, "/t/a", "2")
	_, err := st.CompareAndSwap(ctx(t), "/t/a", r1, []byte("3"))
	wantErr(t, "cas at stale revision", err, errConflict, "/t/a")
	if kv := get(t, st, "/t/a"); string(kv.Value) != "2" {
		t.Fatalf("a failed cas changed the value to %q", kv.Value)
	}
	_, err = st.CompareAndSwap(ctx(t), "/t/missing", r1, []byte("x"))
	wantErr(t, "cas on missing key", err, errConflict, "/t/missing")
	if _, err := st.Get(ctx(t), "/t/missing"); !errdefs.IsNotFound(err) {
		t.Fatalf("a failed cas created the key: %v", err)
	}
}

// testCASConcurrent has workers increment one counter with read-modify-CAS
// loops; every increment must land exactly once.
func (s *suite) testCASConcurrent(t *testing.T, st store.Store) {
	const workers, each, maxTries = 8, 10, 10000
	const key = "/t/counter"
	if _, err := st.CompareAndSwap(ctx(t), key, 0, []byte("0")); err != nil {
		t.Fatalf("create counter: %v", err)
	}
	c := ctx(t)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				done := false
				for try := 0; try < maxTries && !done; try++ {
					kv, err := st.Get(c, key)
					if err != nil {
						errs <- err
						return
					}
					n, _ := strconv.Atoi(string(kv.Value))
					_, err = st.CompareAndSwap(c, key, kv.ModRev, []byte(strconv.Itoa(n+1)))
					switch {
					case err == nil:
						done = true
					case !errdefs.IsConflict(err):
						errs <- err
						return
					}
				}
				if !done {
					errs <- fmt.Errorf("worker %d: no increment landed in %d tries", w, maxTries)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if kv := get(t, st, key); string(kv.Value) != strconv.Itoa(workers*each) {
		t.Fatalf("counter is %s after %d increments", kv.Value, workers*each)
	}
}
