// Package manifest parses and validates an app's shoal.toml: a strict
// decode (an unknown key is an error naming it), the defaults of the keys a
// file leaves out, and checks that name the key at fault. A file is
// measured against its limits (size, nesting, keys, strings) by a linear
// pre-scan before the TOML parser sees it. It is pure: it reads only the
// bytes it is given.
package manifest

import (
	"time"
)

// Config is an app's shoal.toml.
type Config struct {
	Name  string `toml:"name"`
	Image string `toml:"image"`
	// Port is where the app listens in its container; it is also given to
	// the app as $PORT.
	Port int `toml:"port"`
	// Protocol is how the proxy speaks to the replicas: "" (HTTP/1.1,
	// written "http1"), ProtocolH2C (cleartext HTTP/2 with prior
	// knowledge), ProtocolGRPC (h2c for a gRPC server) or ProtocolTCP
	// (the bytes of each connection on Listen relayed as they are). Left
	// out of the hash's JSON when unset, so that apps without it keep
	// their revisions' hashes.
	Protocol string `toml:"protocol" json:",omitempty"`
	// Listen is the port on the proxy's address whose connections go to
	// the app's replicas, for ProtocolTCP only (and required with it).
	Listen int `toml:"listen" json:",omitempty"`
	// Command replaces the image's ENTRYPOINT when set, as Kubernetes'
	// command does: the image's CMD is then dropped unless Args is set.
	Command []string `toml:"command"`
	// Args replaces the image's CMD (Kubernetes' args): the words after
	// Command, or after the image's ENTRYPOINT when Command is unset.
	Args []string `toml:"args" json:",omitempty"`
	// StopSignal is the signal that asks a replica to stop (a name,
	// "SIGQUIT" or "QUIT", or a number); unset, the image's StopSignal,
	// else SIGTERM.
	StopSignal string `toml:"stop_signal" json:",omitempty"`
	// StopTimeout is how long a replica has after StopSignal before
	// SIGKILL (unset or 0: DefaultStopTimeout).
	StopTimeout Duration `toml:"stop_timeout" json:",omitzero"`
	// Init runs shoal-init as the replica's pid 1, the app its child: it
	// passes signals on and reaps orphans (default true).
	Init      bool      `toml:"init"`
	Scale     Scale     `toml:"scale"`
	Resources Resources `toml:"resources"`
	Health    Health    `toml:"health"`
	// Volumes are the app's volumes: name → path in the container.
	Volumes map[string]string `toml:"-"`
	// VolumeOwners are the owners the file gives volumes' roots (the
	// keys uid and gid); left out of the hash's JSON when none is given.
	VolumeOwners map[string]VolumeOwner `toml:"-" json:",omitempty"`
	// RawVolumes is the [volumes] table as decoded, before Parse turns it
	// into Volumes and VolumeOwners.
	RawVolumes map[string]any    `toml:"volumes" json:"-"`
	Env        map[string]string `toml:"env"`
	// Secrets are the secrets each replica sees as files under
	// /run/secrets (see secrets.go); their values are never here.
	Secrets map[string]Secret `toml:"secrets" json:",omitempty"`
	// State is left out of the hash's JSON when unset, so that apps
	// without it keep their revisions' hashes.
	State State `toml:"state" json:",omitzero"`
	// Traffic is how the proxy spreads the app's requests. It is no part
	// of the hash: a change applies at the next deploy without a new
	// revision.
	Traffic Traffic `toml:"traffic" json:",omitzero"`
	// Domains are the app's own host names (see domains.go): the proxy
	// routes them to it, over HTTPS when a certificate covers them. No
	// part of the hash, as Traffic.
	Domains []string `toml:"domains" json:",omitempty"`
	// HTTPS is the [https] table: redirect and HSTS for the domains.
	HTTPS HTTPS `toml:"https" json:",omitzero"`
	// Placement is where the app's replicas run in a cluster; a single
	// host has one place and ignores it. Left out of the hash's JSON
	// when unset, so that apps without it keep their revisions' hashes.
	Placement Placement `toml:"placement" json:",omitzero"`
	// Network is what the replicas may reach (see network.go). Left out
	// of the hash's JSON when it says the defaults.
	Network Network `toml:"network" json:",omitzero"`
	// Stateful makes the app's replicas ordinals with volumes of their
	// own (see stateful.go). Left out of the hash's JSON when unset.
	Stateful Stateful `toml:"stateful" json:",omitzero"`
}

// Protocols of the protocol key besides HTTP/1.1 ("http1", stored as "").
const (
	ProtocolHTTP1 = "http1"
	ProtocolH2C   = "h2c"
	ProtocolGRPC  = "grpc"
	ProtocolTCP   = "tcp"
)

// H2C tells whether the proxy speaks cleartext HTTP/2 to the replicas.
func (c *Config) H2C() bool { return c.Protocol == ProtocolH2C || c.Protocol == ProtocolGRPC }

// TCP tells whether the proxy relays the app's connections on Listen as
// they are, rather than HTTP requests by host.
func (c *Config) TCP() bool { return c.Protocol == ProtocolTCP }

// Placement is the [placement] table: the cluster nodes an app's replicas
// may run on and prefer, and the apps they keep apart from or run with.
type Placement struct {
	// Nodes, when set, are the only nodes the replicas may run on.
	Nodes []string `toml:"nodes" json:",omitempty"`
	// Prefer are nodes the replicas go to first, when the spread of the
	// app's replicas over nodes allows.
	Prefer []string `toml:"prefer" json:",omitempty"`
	// Apart names apps whose nodes the replicas avoid.
	Apart []string `toml:"apart" json:",omitempty"`
	// With names apps whose nodes the replicas join.
	With []string `toml:"with" json:",omitempty"`
}

// Traffic is the [traffic] table.
type Traffic struct {
	// Sticky keeps a client on the replica it first reached, by the
	// cookie shoal-replica. A deploy sets the app's stickiness from it;
	// `shoal app traffic` changes it until the next deploy.
	Sticky bool `toml:"sticky"`
}

// Merge policies of the [state] table.
const (
	MergeAppend = "append" // each file's bytes appended to the same path in the volume
	MergeNewest = "newest" // a file replaces the volume's copy when its mtime is newer
	MergeHook   = "hook"   // a command of the app's image merges
)

// State is the [state] table: a directory of its own for each replica,
// merged into one of the app's volumes when the replica goes for good.
type State struct {
	// Dir is where the replica's state directory is mounted ("/state").
	Dir string `toml:"dir"`
	// Merge is the policy: MergeAppend, MergeNewest or MergeHook.
	Merge string `toml:"merge"`
	// Hook is the command of a hook merge, run from the app's image.
	Hook []string `toml:"hook"`
	// Volume names the volume that receives the merge; the app's only
	// volume when left out.
	Volume string `toml:"volume"`
}

// Enabled reports whether the app declared per-replica state.
func (s State) Enabled() bool { return s.Dir != "" }

// Scale is the [scale] table.
type Scale struct {
	Min               int     `toml:"min"`
	Max               int     `toml:"max"`
	TargetConcurrency float64 `toml:"target_concurrency"`
	// Metric, when set, scales the app on a metric its replicas publish
	// through the self API instead of on concurrency: Target is the value
	// one replica should carry.
	Metric        string   `toml:"metric"`
	Target        float64  `toml:"target"`
	IdleTimeout   Duration `toml:"idle_timeout"`
	FreezeTimeout Duration `toml:"freeze_timeout"`
	MaxLifetime   Duration `toml:"max_lifetime"`
	// Queue bounds the requests held while the app wakes; QueueTimeout is
	// how long one is held before a 503.
	Queue        int      `toml:"queue"`
	QueueTimeout Duration `toml:"queue_timeout"`
	// WebSocketTimeout closes a WebSocket idle this long (0: the
	// proxy's default, 5m).
	WebSocketTimeout Duration `toml:"websocket_timeout" json:",omitzero"`
	// MaxConnections bounds the connections carrying requests that a
	// proxy opens to one replica on its node; requests beyond them wait
	// in the proxy, in order (0: the proxy's default, 32).
	MaxConnections int `toml:"max_connections" json:",omitzero"`
	// DrainTimeout bounds how long a draining replica's in-flight requests
	// may take before it is sent SIGTERM.
	DrainTimeout Duration `toml:"drain_timeout"`
	// RollbackGrace is how long the replicas of a revision that no longer
	// takes traffic stay frozen, so that a rollback thaws them.
	RollbackGrace Duration `toml:"rollback_grace"`
	// Checkpoint, when false, keeps the app's replicas off the checkpoint
	// tier: a replica frozen for freeze_timeout is stopped, not dumped to
	// disk, and the next start boots. True: every such replica is dumped
	// where the host can. Unset: only a replica whose boot was slow
	// (serving's checkpointMinBoot), where a restore is the faster start.
	Checkpoint *bool `toml:"checkpoint" json:",omitempty"`
}

// CheckpointOn reports whether the app's replicas may be checkpointed
// ([scale] checkpoint, true unless set false).
func (s Scale) CheckpointOn() bool { return s.Checkpoint == nil || *s.Checkpoint }

// CheckpointAlways reports whether [scale] checkpoint = true asks for
// every idle replica to be checkpointed, however fast it boots.
func (s Scale) CheckpointAlways() bool { return s.Checkpoint != nil && *s.Checkpoint }

// Resources is the [resources] table.
type Resources struct {
	CPU    float64 `toml:"cpu"`     // cores, the starting quota
	MaxCPU float64 `toml:"max_cpu"` // vertical scaling's ceiling
	Memory string  `toml:"memory"`  // "256Mi"
	Pids   int64   `toml:"pids"`
	// Disk bounds the replica's writable layer, a file system of its
	// own ("1Gi").
	Disk string `toml:"disk"`
	// MaxBody limits a request body ("10Mi").
	MaxBody string `toml:"max_body"`
}

// Health is the [health] table: an HTTP path, a TCP check of Port, a gRPC
// health check (grpc.health.v1.Health/Check over h2c), or a command run
// inside the replica's container.
type Health struct {
	HTTP string `toml:"http"`
	TCP  bool   `toml:"tcp"`
	// GRPC checks with the gRPC health protocol: Check answers SERVING
	// for GRPCService ("" asks about the server as a whole).
	GRPC        bool   `toml:"grpc" json:",omitempty"`
	GRPCService string `toml:"grpc_service" json:",omitempty"`
	// Command is run in the replica's container (as its process, with its
	// environment, limits and filters); exit code 0 is healthy. A replica
	// with a command check is ready once its port takes a connection and
	// the command passes.
	Command  []string `toml:"command" json:",omitempty"`
	Interval Duration `toml:"interval"`
	Timeout  Duration `toml:"timeout"`
	// FailureThreshold failed checks in a row take a ready replica out of
	// the route table (readiness); SuccessThreshold passed ones put it
	// back. 0 (a record written before them): the defaults.
	FailureThreshold int `toml:"failure_threshold" json:",omitempty"`
	SuccessThreshold int `toml:"success_threshold" json:",omitempty"`
	// Failures more in a row, out of the route, replace it (liveness).
	Failures int `toml:"failures"`
	// StartTimeout bounds how long a new replica may take to become ready.
	StartTimeout Duration `toml:"start_timeout"`
}

// Duration is a time.Duration written as a Go duration string ("30s").
type Duration struct{ time.Duration }

// UnmarshalText parses a Go duration string.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

// MarshalText writes d as a Go duration string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.Duration.String()), nil }
