package jobs

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/store"
)

// Job records as daemons have stored them under store.JobKey: a finished
// job with every field set (its request dropped), and a queued one with
// its request. They must decode, and encode again to the same bytes.
const (
	storedFinished = `{"job":{"id":"j00000000000000a1","tenant":"t1","priority":5,"image":"busybox:1","state":"done","ok":false,"error":"e1","attempts":2,"submitted":"2030-01-01T00:00:00Z","started":"2030-01-01T00:00:01Z","finished":"2030-01-01T00:00:02.5Z","steps":[{"name":"build","status":"nonzero_exit","exit_code":3,"signal":"SIGKILL","stdout":"out","stderr":"err","stdout_truncated":true,"stderr_truncated":true,"error":"e2","wall_ms":1.5,"cpu_ms":0.5,"memory_peak_bytes":4096,"create_ms":1,"start_ms":2,"exec_ms":3,"teardown_ms":4},{"status":"skipped","exit_code":0,"stdout":"","stderr":"","wall_ms":0,"cpu_ms":0,"memory_peak_bytes":0,"create_ms":0,"start_ms":0,"exec_ms":0,"teardown_ms":0}],"queue_ms":12.5,"callback":"http://127.0.0.1:9/cb","callback_state":"pending"},"seq":7}`
	storedQueued   = `{"job":{"id":"j00000000000000a2","tenant":"default","priority":0,"image":"busybox:1","state":"queued","ok":false,"attempts":1,"submitted":"2030-01-01T00:00:00Z","queue_ms":0},"request":{"image":"busybox:1","steps":[{"name":"s","args":["sh","-c","exit 3"],"env":["A=1"],"stdin":"aGk=","workdir":"/work/x","limits":{"memory":"64Mi"},"ok_codes":[0,3],"if":"success"}],"files":{"a.txt":"aGVsbG8="},"env":["B=2"],"priority":-3,"limits":{"memory":"128Mi","cpus":0.5,"pids":32,"timeout":"2s","cpu_time":"1s","output":"1Ki","work_size":"1Mi","tmp_size":"2Mi"}},"seq":8}`
)

func TestStoredRecordsDecode(t *testing.T) {
	for _, raw := range []string{storedFinished, storedQueued} {
		var r record
		if err := json.Unmarshal([]byte(raw), &r); err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != raw {
			t.Errorf("record does not encode as stored:\nstored  %s\nencoded %s", raw, b)
		}
	}
	var r record
	json.Unmarshal([]byte(storedFinished), &r)
	j := r.Job
	fin := time.Date(2030, 1, 1, 0, 0, 2, 500_000_000, time.UTC)
	if j.State != Done || j.Attempts != 2 || j.Finished == nil || !j.Finished.Equal(fin) || j.CallbackState != "pending" ||
		len(j.Steps) != 2 || j.Steps[0].Status != StepNonzeroExit || j.Steps[0].ExitCode != 3 || j.Steps[0].MemoryPeak != 4096 ||
		j.Steps[1].Status != StepSkipped || r.Req != nil || r.Seq != 7 {
		t.Fatalf("finished record decoded as %+v", r)
	}
	json.Unmarshal([]byte(storedQueued), &r)
	if r.Job.State != Queued || r.Req == nil || string(r.Req.Files["a.txt"]) != "hello" || r.Req.Steps[0].OKCodes[1] != 3 || r.Seq != 8 {
		t.Fatalf("queued record decoded as %+v", r)
	}
}

// A daemon opening a store written before finds its finished jobs and runs
// its queued ones.
func TestOpenStoredRecords(t *testing.T) {
	st := openStore(t)
	ctx := context.Background()
	for id, raw := range map[string]string{"j00000000000000a1": storedFinished, "j00000000000000a2": storedQueued} {
		if _, err := st.Put(ctx, store.JobKey(id), []byte(raw)); err != nil {
			t.Fatal(err)
		}
	}
	fr := newFakeRunner(false)
	m := openManager(t, Options{Store: st, Runner: fr, CallbackRetries: 1, CallbackBackoff: time.Millisecond})
	defer m.Close()
	j, err := m.Get(ctx, "j00000000000000a1")
	if err != nil || j.State != Done || len(j.Steps) != 2 || j.Steps[0].Stdout != "out" || j.QueueMs != 12.5 {
		t.Fatalf("stored finished job: %+v, %v", j, err)
	}
	if id := fr.waitStart(t); id != "j00000000000000a2" {
		t.Fatalf("started %s, want the stored queued job", id)
	}
	j, err = m.Wait(ctx, "j00000000000000a2")
	if err != nil || j.State != Done || j.Attempts != 2 || !j.OK {
		t.Fatalf("stored queued job: %+v, %v", j, err)
	}
}

// The API shows a job with the same JSON as it is stored.
func TestWireIsStoredJSON(t *testing.T) {
	for _, raw := range []string{storedFinished, storedQueued} {
		var r record
		if err := json.Unmarshal([]byte(raw), &r); err != nil {
			t.Fatal(err)
		}
		stored, _ := json.Marshal(r.Job)
		wire, _ := json.Marshal(r.Job.Wire())
		if string(wire) != string(stored) {
			t.Errorf("wire job differs from the stored one:\nstored %s\nwire   %s", stored, wire)
		}
	}
	if WireJobs(nil) != nil || len(WireJobs([]Job{})) != 0 || WireJobs([]Job{}) == nil {
		t.Fatal("WireJobs must keep nil and empty apart (an empty list is [] in JSON)")
	}
}
