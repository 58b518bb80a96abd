package agent

import (
	"syscall"
	"time"

	"github.com/shoal-run/shoal/internal/manifest"
	"github.com/shoal-run/shoal/internal/node"
)

// The bodies of the replica routes: what a node.Node call takes and
// gives, in JSON. They are the wire's own types, turned from and into
// serving's at each end, so that serving's types carry no wire tags.
type (
	graceReq struct {
		Grace time.Duration `json:"grace"`
	}
	checkReq struct {
		Addr   string          `json:"addr"`
		Health manifest.Health `json:"health"`
	}
	cpuReq struct {
		CPUs float64 `json:"cpus"`
	}
	freezeResp struct {
		Memory int64 `json:"memory"`
	}
	usageResp struct {
		Periods   uint64 `json:"periods"`
		Throttled uint64 `json:"throttled"`
		// UsedNs and StalledNs are CPU time used and waited for, in
		// nanoseconds; Pressure says the node could read the wait.
		UsedNs    int64 `json:"used_ns,omitempty"`
		StalledNs int64 `json:"stalled_ns,omitempty"`
		Pressure  bool  `json:"pressure,omitempty"`
	}
	// waitResp is a long poll's answer: the exit, or that the replica
	// still runs when the poll's time is up (the caller asks again).
	waitResp struct {
		Exited bool       `json:"exited"`
		Status exitStatus `json:"status"`
	}
	exitStatus struct {
		Code      int  `json:"code"`
		Signal    int  `json:"signal,omitempty"`
		OOMKilled bool `json:"oom_killed,omitempty"`
		Known     bool `json:"known"`
	}
	// replicaSpec is a node.ReplicaSpec.
	replicaSpec struct {
		ID        string          `json:"id"`
		App       string          `json:"app"`
		Revision  int             `json:"revision"`
		Digest    string          `json:"digest"`
		Config    manifest.Config `json:"config"`
		Env       []string        `json:"env,omitempty"`
		Mounts    []mount         `json:"mounts,omitempty"`
		Log       string          `json:"log"`
		ImageFrom string          `json:"image_from,omitempty"`
	}
	mount struct {
		Source      string   `json:"source"`
		Destination string   `json:"destination"`
		ReadOnly    bool     `json:"read_only,omitempty"`
		Type        string   `json:"type,omitempty"`
		Options     []string `json:"options,omitempty"`
		SizeBytes   int64    `json:"size_bytes,omitempty"`
	}
	// started is a node.Started (the caller knows the node).
	started struct {
		Addr   string `json:"addr"`
		Pid    int    `json:"pid"`
		CPUSet string `json:"cpuset,omitempty"`
	}
	// known is a node.Known.
	known struct {
		ID     string  `json:"id"`
		App    string  `json:"app"`
		CPUSet string  `json:"cpuset,omitempty"`
		Node   string  `json:"node,omitempty"`
		CPU    float64 `json:"cpu,omitempty"`
		Memory int64   `json:"memory,omitempty"`
		Port   int     `json:"port,omitempty"`
	}
	// adopted is a node.Adopted.
	adopted struct {
		Running bool   `json:"running"`
		Frozen  bool   `json:"frozen,omitempty"`
		Pid     int    `json:"pid,omitempty"`
		Addr    string `json:"addr,omitempty"`
	}
	// logTail is a node.LogTail.
	logTail struct {
		Lines  []string       `json:"lines"`
		Mod    time.Time      `json:"mod"`
		Cursor node.LogCursor `json:"cursor"`
	}
)

func toExit(s node.ExitStatus) exitStatus {
	return exitStatus{Code: s.Code, Signal: int(s.Signal), OOMKilled: s.OOMKilled, Known: s.Known}
}

func (e exitStatus) status() node.ExitStatus {
	return node.ExitStatus{Code: e.Code, Signal: syscall.Signal(e.Signal), OOMKilled: e.OOMKilled, Known: e.Known}
}

func toSpec(s node.ReplicaSpec) replicaSpec {
	w := replicaSpec{ID: s.ID, App: s.App, Revision: s.Revision, Digest: s.Digest, Config: s.Config, Env: s.Env,
		Log: s.Log, ImageFrom: s.ImageFrom}
	for _, m := range s.Mounts {
		w.Mounts = append(w.Mounts, mount{Source: m.Source, Destination: m.Destination, ReadOnly: m.ReadOnly,
			Type: m.Type, Options: m.Options, SizeBytes: m.SizeBytes})
	}
	return w
}

func (w replicaSpec) spec() node.ReplicaSpec {
	s := node.ReplicaSpec{ID: w.ID, App: w.App, Revision: w.Revision, Digest: w.Digest, Config: w.Config, Env: w.Env,
		Log: w.Log, ImageFrom: w.ImageFrom}
	for _, m := range w.Mounts {
		s.Mounts = append(s.Mounts, node.Mount{Source: m.Source, Destination: m.Destination, ReadOnly: m.ReadOnly,
			Type: m.Type, Options: m.Options, SizeBytes: m.SizeBytes})
	}
	return s
}

func toStarted(s node.Started) started { return started{Addr: s.Addr, Pid: s.Pid, CPUSet: s.CPUSet} }

func (w started) started(name string) node.Started {
	return node.Started{Addr: w.Addr, Pid: w.Pid, CPUSet: w.CPUSet, Node: name}
}

func toKnown(k node.Known) known {
	return known{ID: k.ID, App: k.App, CPUSet: k.CPUSet, Node: k.Node, CPU: k.CPU, Memory: k.Memory, Port: k.Port}
}

func (w known) known() node.Known {
	return node.Known{ID: w.ID, App: w.App, CPUSet: w.CPUSet, Node: w.Node, CPU: w.CPU, Memory: w.Memory, Port: w.Port}
}

func toAdopted(a node.Adopted) adopted {
	return adopted{Running: a.Running, Frozen: a.Frozen, Pid: a.Pid, Addr: a.Addr}
}

func (w adopted) adopted() node.Adopted {
	return node.Adopted{Running: w.Running, Frozen: w.Frozen, Pid: w.Pid, Addr: w.Addr}
}

func toLogTail(t node.LogTail) logTail { return logTail{Lines: t.Lines, Mod: t.Mod, Cursor: t.Cursor} }

func (w logTail) tail() node.LogTail {
	return node.LogTail{Lines: w.Lines, Mod: w.Mod, Cursor: w.Cursor}
}
