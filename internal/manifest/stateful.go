package manifest

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// Stateful is the [stateful] table: an app whose replicas each own their
// data. Its replicas have ordinals 0..Replicas-1 and stable names
// (<app>-<ordinal>); each ordinal has its own copy of every volume
// (<volume>-<ordinal>), which outlives the replica and is mounted again by
// its successor. They start in order (an ordinal once the one before is
// ready), stop in reverse order, are replaced in place and upgraded one at
// a time.
type Stateful struct {
	// Replicas is how many ordinals run: 1-MaxReplicas. It is no part of
	// the hash: a deploy that changes only the count scales the app
	// without a new revision.
	Replicas int `toml:"replicas"`
	// ReadyCommand, when set, runs in a replica (as a command health
	// check does) once its health check passed; the next ordinal starts,
	// and a rolling upgrade moves on, only once it exits 0.
	ReadyCommand []string `toml:"ready_command" json:",omitempty"`
	// Reseed says the app copies its data between replicas itself (as
	// Galera's state transfer does): in a cluster, an ordinal whose
	// volume's node is lost starts on another node with a fresh volume.
	// Without it, the ordinal waits for its node.
	Reseed bool `toml:"reseed" json:",omitempty"`
	// AllowZero lets `shoal app scale` take the app to 0 replicas.
	AllowZero bool `toml:"allow_zero" json:",omitempty"`
	// Freeze lets idle replicas freeze after [scale] idle_timeout, as a
	// stateless app's do; without it they stay ready.
	Freeze bool `toml:"freeze" json:",omitempty"`
	// PeerPorts are the TCP ports the replicas reach each other on (a
	// Galera member's 4567, 4568 and 4444). In a cluster each node
	// publishes them, unchanged, on its advertised address for the
	// ordinal it runs, and SHOAL_PEERS names the peers' nodes: a second
	// ordinal on a node fails to start (the ports are taken), so a
	// cluster needs a node per ordinal (and one more for a reseed). The
	// first is the port in SHOAL_PEERS.
	PeerPorts []int `toml:"peer_ports" json:",omitempty"`
}

// MaxPeerPorts bounds stateful.peer_ports.
const MaxPeerPorts = 16

// Enabled reports whether the app is stateful.
func (s Stateful) Enabled() bool { return s.Replicas > 0 }

// ReplicaName is the stable name of ordinal i of app.
func ReplicaName(app string, i int) string { return app + "-" + strconv.Itoa(i) }

// OrdinalVolume is the folder name of ordinal i's copy of volume name.
func OrdinalVolume(name string, i int) string { return name + "-" + strconv.Itoa(i) }

// ordinalSuffix matches a name that ends as an ordinal's volume does.
var ordinalSuffix = regexp.MustCompile(`-[0-9]+$`)

// SplitOrdinalVolume splits an ordinal volume's folder name
// ("data-2") into the volume's name and the ordinal.
func SplitOrdinalVolume(dir string) (string, int, bool) {
	i := strings.LastIndexByte(dir, '-')
	if i <= 0 || !ordinalSuffix.MatchString(dir) {
		return "", 0, false
	}
	n, err := strconv.Atoi(dir[i+1:])
	if err != nil || n < 0 || n >= MaxReplicas {
		return "", 0, false
	}
	return dir[:i], n, true
}

// validate checks the [stateful] table against the rest of c; defined
// tells whether the file has the table, scaleSet the [scale] keys it
// sets that the table replaces.
func (s *Stateful) validate(c *Config, defined bool, scaleSet []string) error {
	if !defined {
		return nil
	}
	switch {
	case s.Replicas < 1 || s.Replicas > MaxReplicas:
		return errdefs.Invalid("stateful.replicas", "%d must be 1-%d: the number of ordinals (<app>-0, <app>-1, ...)", s.Replicas, MaxReplicas)
	case len(scaleSet) > 0:
		return errdefs.Invalid("scale."+scaleSet[0], "a stateful app runs stateful.replicas replicas; leave scale.min and scale.max out")
	case c.State.Enabled():
		return errdefs.Invalid("state.dir", "a stateful app keeps its data in volumes of each replica's own; [state] merge is for stateless apps")
	case len(c.Volumes) == 0:
		return errdefs.Invalid("volumes", "a stateful app needs a volume under [volumes]: each replica gets its own copy (data = \"/data\")")
	case len(s.ReadyCommand) > 64:
		return errdefs.Invalid("stateful.ready_command", "has %d arguments; at most 64", len(s.ReadyCommand))
	case s.ReadyCommand != nil && (len(s.ReadyCommand) == 0 || strings.TrimSpace(s.ReadyCommand[0]) == ""):
		return errdefs.Invalid("stateful.ready_command", "must name a program to run in the replica, e.g. [\"/bin/sh\", \"-c\", \"test -f /data/synced\"]")
	}
	for i, a := range s.ReadyCommand {
		if strings.ContainsRune(a, 0) {
			return errdefs.Invalid(fmt.Sprintf("stateful.ready_command[%d]", i), "must not contain a NUL byte")
		}
	}
	if len(s.PeerPorts) > MaxPeerPorts {
		return errdefs.Invalid("stateful.peer_ports", "has %d ports; at most %d", len(s.PeerPorts), MaxPeerPorts)
	}
	seen := map[int]bool{}
	for i, p := range s.PeerPorts {
		key := fmt.Sprintf("stateful.peer_ports[%d]", i)
		switch {
		case p < 1 || p > 65535:
			return errdefs.Invalid(key, "%d is not a TCP port (1-65535) the replicas reach each other on", p)
		case seen[p]:
			return errdefs.Invalid(key, "port %d is listed twice", p)
		}
		seen[p] = true
	}
	for _, name := range sortedKeys(c.Volumes) {
		if ordinalSuffix.MatchString(name) {
			return errdefs.Invalid("volumes."+name, "a stateful app's volume name must not end in -<number>: each replica's copy is named <volume>-<ordinal>")
		}
	}
	return nil
}
