package agent

import (
	"encoding/json"
	"reflect"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/manifest"
	"github.com/shoal-run/shoal/internal/node"
)

// through sends v over the wire as JSON and reads it back into out.
func through(t *testing.T, v, out any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
}

// Every field of package node's types crosses the wire unchanged.
func TestWireTypesRoundTrip(t *testing.T) {
	spec := node.ReplicaSpec{ID: "web-1", App: "web", Revision: 3, Digest: "sha256:abc",
		Config: manifest.Config{Name: "web", Image: "web:1", Port: 8080},
		Env:    []string{"A=1"}, Log: "web/web-1.log", ImageFrom: "n1",
		Mounts: []node.Mount{{Source: "/v", Destination: "/data", ReadOnly: true, Type: "tmpfs", Options: []string{"nosuid"}, SizeBytes: 9}}}
	var ws replicaSpec
	through(t, toSpec(spec), &ws)
	if got := ws.spec(); !reflect.DeepEqual(got, spec) {
		t.Errorf("spec:\n got %+v\nwant %+v", got, spec)
	}
	var st started
	through(t, toStarted(node.Started{Addr: "10.77.0.5:8080", Pid: 7, CPUSet: "1"}), &st)
	if got := st.started("n2"); got != (node.Started{Addr: "10.77.0.5:8080", Pid: 7, CPUSet: "1", Node: "n2"}) {
		t.Errorf("started: %+v", got)
	}
	k := node.Known{ID: "web-1", App: "web", CPUSet: "1", Node: "n2", CPU: 0.5, Memory: 1 << 20, Port: 8080}
	var wk known
	through(t, toKnown(k), &wk)
	if got := wk.known(); got != k {
		t.Errorf("known: %+v", got)
	}
	a := node.Adopted{Running: true, Frozen: true, Pid: 7, Addr: "10.77.0.5:8080"}
	var wa adopted
	through(t, toAdopted(a), &wa)
	if got := wa.adopted(); got != a {
		t.Errorf("adopted: %+v", got)
	}
	x := node.ExitStatus{Code: 137, Signal: syscall.SIGKILL, OOMKilled: true, Known: true}
	var wx exitStatus
	through(t, toExit(x), &wx)
	if got := wx.status(); got != x {
		t.Errorf("exit: %+v", got)
	}
	lt := node.LogTail{Lines: []string{"a", "b"}, Mod: time.Unix(1e9, 0).UTC()}
	var wl logTail
	through(t, toLogTail(lt), &wl)
	if got := wl.tail(); !reflect.DeepEqual(got, lt) {
		t.Errorf("log tail: %+v", got)
	}
}
