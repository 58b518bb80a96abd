package manifest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/units"
)

// Defaults of shoal.toml, applied by Parse to the keys a file leaves out.
const (
	DefaultPort              = 8080
	DefaultMax               = 10
	DefaultTargetConcurrency = 10
	DefaultTarget            = 10 // of [scale] metric, per replica
	DefaultIdleTimeout       = 30 * time.Second
	DefaultFreezeTimeout     = 10 * time.Minute
	DefaultQueue             = 100
	DefaultQueueTimeout      = 30 * time.Second
	DefaultDrainTimeout      = 30 * time.Second
	DefaultRollbackGrace     = 10 * time.Minute
	DefaultCPU               = 0.5
	DefaultMemory            = "256Mi"
	DefaultPids              = 256
	DefaultDisk              = "1Gi"
	DefaultMaxBody           = "10Mi"
	DefaultHealthInterval    = time.Second
	DefaultHealthTimeout     = time.Second
	DefaultHealthFailures    = 3
	DefaultFailureThreshold  = 3
	DefaultSuccessThreshold  = 1
	DefaultStartTimeout      = 60 * time.Second
)

// Bounds checked by Validate.
const (
	MaxNameLen  = 40
	MaxReplicas = 1000
	MaxCPU      = 1024
	MinCPU      = 0.01
	MinDisk     = 16 << 20
	MaxDisk     = 1 << 40
)

// Parse decodes a shoal.toml strictly (a key the file format does not
// know is an error naming it), fills in the defaults of the keys it leaves
// out and validates the result. file names the manifest in error messages.
// A file beyond the limits (MaxFileSize, MaxDepth...) is refused before it
// is decoded.
// Errors are errdefs.FieldError values naming the key ("scale.max").
func Parse(data []byte, file string) (Config, error) {
	if file == "" {
		file = "shoal.toml"
	}
	if err := checkLimits(data); err != nil {
		return Config{}, fmt.Errorf("%s: %w", file, err)
	}
	var c Config
	md, err := toml.NewDecoder(bytes.NewReader(data)).Decode(&c)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", file, decodeError(err))
	}
	var und []toml.Key
	for _, k := range md.Undecoded() {
		// A volume's table is decodeVolumes' to check.
		if len(k) < 3 || k[0] != "volumes" {
			und = append(und, k)
		}
	}
	if len(und) > 0 {
		keys := make([]string, len(und))
		for i, k := range und {
			keys[i] = k.String()
		}
		return Config{}, fmt.Errorf("%s: %w", file, errdefs.Invalid(keys[0], "unknown field%s", others(keys[1:])))
	}
	// The decoder leaves a map alone when the file gives a plain value
	// ("env = 1"); say so instead of dropping it.
	for _, key := range []string{"volumes", "env", "secrets"} {
		// "": a table given only as [volumes.NAME].
		if md.IsDefined(key) && md.Type(key) != "Hash" && (key != "volumes" || md.Type(key) != "") {
			return Config{}, fmt.Errorf("%s: %w", file, errdefs.Invalid(key, "must be a table ([%s] followed by name = \"value\" lines); found a value of type %s", key, strings.ToLower(md.Type(key))))
		}
	}
	if err := c.decodeVolumes(); err != nil {
		return Config{}, fmt.Errorf("%s: %w", file, err)
	}
	var scaleSet []string
	for _, k := range []string{"min", "max"} {
		if md.IsDefined("scale", k) {
			scaleSet = append(scaleSet, k)
		}
	}
	if err := c.Stateful.validate(&c, md.IsDefined("stateful"), scaleSet); err != nil {
		return Config{}, fmt.Errorf("%s: %w", file, err)
	}
	c.applyDefaults(&md)
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("%s: %w", file, err)
	}
	return c, nil
}

func others(keys []string) string {
	if len(keys) == 0 {
		return ""
	}
	return " (also unknown: " + strings.Join(keys, ", ") + ")"
}

// decodeError turns a TOML syntax or type error into a FieldError naming the
// key it concerns, or the line when there is no key.
func decodeError(err error) error {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		field := pe.LastKey
		msg := pe.Message
		if m := dupKey.FindStringSubmatch(msg); field == "" && m != nil {
			field = m[1]
		}
		if field == "" {
			return errdefs.Invalid(fmt.Sprintf("line %d", pe.Position.Line), "%s", msg)
		}
		return errdefs.Invalid(field, "line %d: %s", pe.Position.Line, msg)
	}
	// Type mismatches ("port = \"x\"") and bad durations come without a
	// position; the decoder's message names the key.
	msg := err.Error()
	if m := typeErr.FindStringSubmatch(msg); m != nil {
		return errdefs.Invalid(m[2], "line %s: %s", m[1], m[3])
	}
	return errdefs.Invalid("manifest", "%s", strings.TrimPrefix(msg, "toml: "))
}

var dupKey = regexp.MustCompile(`^Key '([^']+)' has already been defined`)

var typeErr = regexp.MustCompile(`^toml: line (\d+) \(last key "([^"]+)"\): (.*)$`)

// applyDefaults fills in what the file left out. md tells an explicit zero
// ("min = 0", "cpu = 0") from a missing key.
func (c *Config) applyDefaults(md *toml.MetaData) {
	def := func(keys ...string) bool { return !md.IsDefined(keys...) }
	if def("port") {
		c.Port = DefaultPort
	}
	if def("init") {
		c.Init = true
	}
	if def("https", "redirect") {
		c.HTTPS.Redirect = true
	}
	if def("https", "hsts") {
		c.HTTPS.HSTS = true
	}
	s := &c.Scale
	if def("scale", "max") {
		s.Max = max(DefaultMax, s.Min)
	}
	if n := c.Stateful.Replicas; n > 0 {
		// A stateful app runs its ordinals, no more, no fewer.
		s.Min, s.Max = n, n
	}
	if def("scale", "target_concurrency") {
		s.TargetConcurrency = DefaultTargetConcurrency
	}
	if s.Metric != "" && def("scale", "target") {
		s.Target = DefaultTarget
	}
	if def("scale", "idle_timeout") {
		s.IdleTimeout.Duration = DefaultIdleTimeout
	}
	if def("scale", "freeze_timeout") {
		s.FreezeTimeout.Duration = DefaultFreezeTimeout
	}
	if def("scale", "queue") {
		s.Queue = DefaultQueue
	}
	if def("scale", "queue_timeout") {
		s.QueueTimeout.Duration = DefaultQueueTimeout
	}
	if def("scale", "drain_timeout") {
		s.DrainTimeout.Duration = DefaultDrainTimeout
	}
	if def("scale", "rollback_grace") {
		s.RollbackGrace.Duration = DefaultRollbackGrace
	}
	r := &c.Resources
	if def("resources", "cpu") {
		r.CPU = DefaultCPU
	}
	if def("resources", "max_cpu") {
		r.MaxCPU = r.CPU
	}
	if def("resources", "memory") {
		r.Memory = DefaultMemory
	}
	if def("resources", "pids") {
		r.Pids = DefaultPids
	}
	if def("resources", "disk") {
		r.Disk = DefaultDisk
	}
	if def("resources", "max_body") {
		r.MaxBody = DefaultMaxBody
	}
	h := &c.Health
	if c.Protocol == ProtocolHTTP1 {
		c.Protocol = ""
	}
	if h.HTTP == "" && h.Command == nil && !h.GRPC && def("health", "tcp") {
		h.TCP = true
	}
	if def("health", "interval") {
		h.Interval.Duration = DefaultHealthInterval
	}
	if def("health", "timeout") {
		h.Timeout.Duration = DefaultHealthTimeout
	}
	if def("health", "failures") {
		h.Failures = DefaultHealthFailures
	}
	if def("health", "failure_threshold") {
		h.FailureThreshold = DefaultFailureThreshold
	}
	if def("health", "success_threshold") {
		h.SuccessThreshold = DefaultSuccessThreshold
	}
	if def("health", "start_timeout") {
		h.StartTimeout.Duration = DefaultStartTimeout
	}
	if len(c.Command) == 0 {
		c.Command = nil
	}
	if len(c.Args) == 0 {
		c.Args = nil
	}
	if len(c.Volumes) == 0 {
		c.Volumes = nil
	}
	if len(c.Env) == 0 {
		c.Env = nil
	}
	if len(c.Secrets) == 0 {
		c.Secrets = nil
	}
	st := &c.State
	if len(st.Hook) == 0 {
		st.Hook = nil
	}
	if st.Dir != "" && st.Volume == "" && len(c.Volumes) == 1 {
		for name := range c.Volumes {
			st.Volume = name
		}
	}
}

// MemoryBytes is the memory limit in bytes (0: none). Validate has checked
// that Memory parses.
func (r Resources) MemoryBytes() int64 { return bytesOf(r.Memory) }

// DiskBytes is the size of the replica's writable layer in bytes (0: an
// older revision's config, without a disk of its own).
func (r Resources) DiskBytes() int64 { return bytesOf(r.Disk) }

// MaxBodyBytes is the request body limit in bytes (0: none).
func (r Resources) MaxBodyBytes() int64 { return bytesOf(r.MaxBody) }

func bytesOf(s string) int64 {
	if s == "" {
		return 0
	}
	n, err := units.ParseBytes(s)
	if err != nil {
		return 0
	}
	return n
}

// Hash is a stable digest of the configuration (hex SHA-256 of its canonical
// JSON form): two manifests that differ only in layout, key order or spelled
// out defaults have the same hash. A new revision is made when it changes.
// The [traffic] and [https] tables and domains are left out: they change
// the route, not the replicas.
func (c Config) Hash() string {
	n := c
	if len(n.Command) == 0 {
		n.Command = nil
	}
	if len(n.Args) == 0 {
		n.Args = nil
	}
	if n.StopTimeout.Duration == DefaultStopTimeout {
		n.StopTimeout.Duration = 0
	}
	if len(n.Health.Command) == 0 {
		n.Health.Command = nil
	}
	if n.Health.FailureThreshold == DefaultFailureThreshold {
		n.Health.FailureThreshold = 0
	}
	if n.Health.SuccessThreshold == DefaultSuccessThreshold {
		n.Health.SuccessThreshold = 0
	}
	if len(n.Volumes) == 0 {
		n.Volumes = nil
	}
	if len(n.VolumeOwners) == 0 {
		n.VolumeOwners = nil
	}
	n.RawVolumes = nil
	if len(n.Env) == 0 {
		n.Env = nil
	}
	if len(n.Secrets) == 0 {
		n.Secrets = nil
	}
	// Routing changes apply without a revision of their own.
	n.Traffic = Traffic{}
	n.Domains, n.HTTPS = nil, HTTPS{}
	if len(n.Placement.Nodes)+len(n.Placement.Prefer)+len(n.Placement.Apart)+len(n.Placement.With) == 0 {
		n.Placement = Placement{}
	}
	n.Network = n.Network.canonical()
	if n.Stateful.Enabled() {
		// The count scales the app; it needs no revision of its own.
		n.Stateful.Replicas = 1
		n.Scale.Min, n.Scale.Max = 1, 1
		if len(n.Stateful.ReadyCommand) == 0 {
			n.Stateful.ReadyCommand = nil
		}
	}
	// Sizes are compared by value: "256Mi" and "268435456" are one limit.
	n.Resources.Memory = fmt.Sprint(n.Resources.MemoryBytes())
	n.Resources.MaxBody = fmt.Sprint(n.Resources.MaxBodyBytes())
	n.Resources.Disk = fmt.Sprint(n.Resources.DiskBytes())
	b, err := json.Marshal(n) // map keys are sorted
	if err != nil {
		panic(fmt.Sprintf("manifest: config hash: %v", err))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
