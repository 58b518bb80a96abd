package manifest

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/shoal-run/shoal/internal/appapi"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/units"
)

// IsDNSLabel reports whether s is a valid app or volume name: lowercase
// letters, digits and '-', starting with a letter, not ending with '-', at
// most MaxNameLen characters.
func IsDNSLabel(s string) bool { return len(s) <= MaxNameLen && dnsLabel.MatchString(s) }

var (
	dnsLabel = regexp.MustCompile(`^[a-z]([a-z0-9-]*[a-z0-9])?$`)
	envKey   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// cleanAbs reports whether p is an absolute, clean path other than "/".
func cleanAbs(p string) bool {
	return strings.HasPrefix(p, "/") && path.Clean(p) == p && p != "/"
}

// underAny reports whether p is one of roots or below one.
func underAny(p string, roots ...string) bool {
	for _, r := range roots {
		if p == r || strings.HasPrefix(p, r+"/") {
			return true
		}
	}
	return false
}

// Validate checks every field of a Config that has its defaults applied and
// returns the first problem as an errdefs.FieldError naming the key.
func (c *Config) Validate() error {
	switch {
	case c.Name == "":
		return errdefs.Invalid("name", "is required")
	case !IsDNSLabel(c.Name):
		return errdefs.Invalid("name", "%q must be a DNS label: lowercase letters, digits and '-', starting with a letter, at most %d characters", c.Name, MaxNameLen)
	case strings.TrimSpace(c.Image) == "":
		return errdefs.Invalid("image", "is required (an image reference such as hello:1)")
	case strings.ContainsAny(c.Image, " \t\r\n"):
		return errdefs.Invalid("image", "%q must not contain white space", c.Image)
	case c.Port < 1 || c.Port > 65535:
		return errdefs.Invalid("port", "%d must be a port number 1-65535", c.Port)
	case c.Protocol != "" && c.Protocol != ProtocolH2C && c.Protocol != ProtocolGRPC && c.Protocol != ProtocolTCP:
		return errdefs.Invalid("protocol", "%q must be %q, %q, %q or %q", c.Protocol, ProtocolHTTP1, ProtocolH2C, ProtocolGRPC, ProtocolTCP)
	}
	if err := c.validateTCP(); err != nil {
		return err
	}
	for i, a := range c.Command {
		if strings.ContainsRune(a, 0) {
			return errdefs.Invalid(fmt.Sprintf("command[%d]", i), "must not contain a NUL byte")
		}
	}
	for i, a := range c.Args {
		if strings.ContainsRune(a, 0) {
			return errdefs.Invalid(fmt.Sprintf("args[%d]", i), "must not contain a NUL byte")
		}
	}
	if err := c.validateStop(); err != nil {
		return err
	}
	if err := c.Scale.validate(); err != nil {
		return err
	}
	if err := c.Resources.validate(); err != nil {
		return err
	}
	if err := c.Health.validate(); err != nil {
		return err
	}
	if err := validateVolumes(c.Volumes); err != nil {
		return err
	}
	if err := validateOwners(c.Volumes, c.VolumeOwners); err != nil {
		return err
	}
	if err := c.State.validate(c.Volumes); err != nil {
		return err
	}
	if err := c.Placement.validate(c.Name); err != nil {
		return err
	}
	if err := c.Network.validate(); err != nil {
		return err
	}
	if err := c.validateSecrets(); err != nil {
		return err
	}
	if err := c.validateDomains(); err != nil {
		return err
	}
	return validateEnv(c.Env)
}

// validate checks the [state] table against the app's volumes.
func (s *State) validate(vols map[string]string) error {
	if s.Dir == "" {
		if s.Merge != "" || len(s.Hook) > 0 || s.Volume != "" {
			return errdefs.Invalid("state.dir", "is required with the other keys of [state] (the replica's state directory, such as \"/state\")")
		}
		return nil
	}
	switch {
	case !cleanAbs(s.Dir):
		return errdefs.Invalid("state.dir", "%q must be an absolute, clean path in the container, not /", s.Dir)
	case underAny(s.Dir, "/proc", "/sys", "/dev"):
		return errdefs.Invalid("state.dir", "%q is under /proc, /sys or /dev", s.Dir)
	}
	for _, name := range sortedKeys(vols) {
		if p := vols[name]; underAny(s.Dir, p) || underAny(p, s.Dir) {
			return errdefs.Invalid("state.dir", "%q overlaps volume %q (%s); the state directory must be apart from the volumes", s.Dir, name, p)
		}
	}
	switch s.Merge {
	case MergeAppend, MergeNewest, MergeHook:
	case "":
		return errdefs.Invalid("state.merge", "is required: \"append\" (logs), \"newest\" (files) or \"hook\" (a command of the image)")
	default:
		return errdefs.Invalid("state.merge", "%q must be \"append\", \"newest\" or \"hook\"", s.Merge)
	}
	switch {
	case s.Merge == MergeHook && len(s.Hook) == 0:
		return errdefs.Invalid("state.hook", "is required for merge = \"hook\": the command to run, such as [\"sh\", \"-c\", \"...\"]")
	case s.Merge != MergeHook && len(s.Hook) > 0:
		return errdefs.Invalid("state.hook", "is only for merge = \"hook\" (merge is %q)", s.Merge)
	case len(s.Hook) > 0 && s.Hook[0] == "":
		return errdefs.Invalid("state.hook[0]", "must name a command")
	}
	for i, a := range s.Hook {
		if strings.ContainsRune(a, 0) {
			return errdefs.Invalid(fmt.Sprintf("state.hook[%d]", i), "must not contain a NUL byte")
		}
	}
	switch {
	case len(vols) == 0:
		return errdefs.Invalid("state.volume", "the state of replicas is merged into a volume; declare one under [volumes]")
	case s.Volume == "":
		return errdefs.Invalid("state.volume", "is required when the app has several volumes: one of %s", strings.Join(sortedKeys(vols), ", "))
	case vols[s.Volume] == "":
		return errdefs.Invalid("state.volume", "%q is not a volume of the app: one of %s", s.Volume, strings.Join(sortedKeys(vols), ", "))
	}
	return nil
}

func (s *Scale) validate() error {
	switch {
	case s.Min < 0:
		return errdefs.Invalid("scale.min", "%d must be 0 or more", s.Min)
	case s.Max < 1:
		return errdefs.Invalid("scale.max", "%d must be at least 1", s.Max)
	case s.Max > MaxReplicas:
		return errdefs.Invalid("scale.max", "%d must be at most %d", s.Max, MaxReplicas)
	case s.Max < s.Min:
		return errdefs.Invalid("scale.max", "%d must be at least scale.min (%d)", s.Max, s.Min)
	case !(s.TargetConcurrency > 0) || s.TargetConcurrency > 1e6:
		return errdefs.Invalid("scale.target_concurrency", "%v must be more than 0 (in-flight requests per replica)", s.TargetConcurrency)
	case s.Queue < 0:
		return errdefs.Invalid("scale.queue", "%d must be 0 or more", s.Queue)
	case s.MaxConnections < 0 || s.MaxConnections > MaxConnections:
		return errdefs.Invalid("scale.max_connections", "%d must be 1-%d (or unset: 32)", s.MaxConnections, MaxConnections)
	case s.Metric != "" && !appapi.ValidMetricName(s.Metric):
		return errdefs.Invalid("scale.metric", "%q must be lowercase letters, digits and _, starting with a letter, at most 63", s.Metric)
	case s.Metric == "" && s.Target != 0:
		return errdefs.Invalid("scale.target", "needs scale.metric, the app metric it is a target for")
	case s.Metric != "" && (!(s.Target > 0) || s.Target > 1e12):
		return errdefs.Invalid("scale.target", "%v must be more than 0 (the metric's value per replica)", s.Target)
	}
	for _, d := range []struct {
		key string
		d   Duration
	}{
		{"scale.idle_timeout", s.IdleTimeout}, {"scale.freeze_timeout", s.FreezeTimeout},
		{"scale.max_lifetime", s.MaxLifetime}, {"scale.queue_timeout", s.QueueTimeout},
		{"scale.drain_timeout", s.DrainTimeout}, {"scale.rollback_grace", s.RollbackGrace},
		{"scale.websocket_timeout", s.WebSocketTimeout},
	} {
		if d.d.Duration < 0 {
			return errdefs.Invalid(d.key, "%s must not be negative", d.d.Duration)
		}
	}
	if w := s.WebSocketTimeout.Duration; w != 0 && (w < time.Second || w > 24*time.Hour) {
		return errdefs.Invalid("scale.websocket_timeout", "%s must be 1s-24h (or unset: 5m)", w)
	}
	return nil
}

// MaxConnections is the most [scale] max_connections may be.
const MaxConnections = 4096

func (r *Resources) validate() error {
	switch {
	case r.CPU != 0 && !(r.CPU >= MinCPU && r.CPU <= MaxCPU):
		return errdefs.Invalid("resources.cpu", "%v must be 0 (no quota) or %v-%v cores", r.CPU, MinCPU, MaxCPU)
	case r.MaxCPU != 0 && !(r.MaxCPU >= MinCPU && r.MaxCPU <= MaxCPU):
		return errdefs.Invalid("resources.max_cpu", "%v must be 0 (no quota) or %v-%v cores", r.MaxCPU, MinCPU, MaxCPU)
	case r.CPU == 0 && r.MaxCPU != 0:
		return errdefs.Invalid("resources.max_cpu", "%v needs a starting quota in resources.cpu", r.MaxCPU)
	case r.MaxCPU < r.CPU:
		return errdefs.Invalid("resources.max_cpu", "%v must be at least resources.cpu (%v)", r.MaxCPU, r.CPU)
	case r.Pids < 0:
		return errdefs.Invalid("resources.pids", "%d must be 0 (no limit) or more", r.Pids)
	}
	if n, err := units.ParseBytes(r.Disk); err != nil {
		return errdefs.Invalid("resources.disk", "%v", err)
	} else if n < MinDisk || n > MaxDisk {
		return errdefs.Invalid("resources.disk", "%q must be between 16Mi and 1Ti (the replica's writable layer)", r.Disk)
	}
	for _, s := range []struct{ key, v string }{{"resources.memory", r.Memory}, {"resources.max_body", r.MaxBody}} {
		if s.v == "" {
			continue
		}
		n, err := units.ParseBytes(s.v)
		if err != nil {
			return errdefs.Invalid(s.key, "%v", err)
		}
		if s.key == "resources.memory" && n != 0 && n < 4<<20 {
			return errdefs.Invalid(s.key, "%q is below the 4Mi a container needs to start", s.v)
		}
	}
	return nil
}

func (h *Health) validate() error {
	if h.Command != nil {
		if err := h.validateCommand(); err != nil {
			return err
		}
	}
	switch {
	case h.HTTP != "" && h.TCP:
		return errdefs.Invalid("health.tcp", "health.http and health.tcp exclude each other; set one")
	case h.GRPC && (h.HTTP != "" || h.TCP || h.Command != nil):
		return errdefs.Invalid("health.grpc", "health.grpc excludes health.http, health.tcp and health.command; set one")
	case h.GRPCService != "" && !h.GRPC:
		return errdefs.Invalid("health.grpc_service", "needs grpc = true")
	case len(h.GRPCService) > 256 || strings.ContainsAny(h.GRPCService, " \t\r\n\x00"):
		return errdefs.Invalid("health.grpc_service", "%q must be a service name of at most 256 characters without white space", h.GRPCService)
	case h.HTTP == "" && !h.TCP && h.Command == nil && !h.GRPC:
		return errdefs.Invalid("health", "needs a check: set http = \"/path\", tcp = true, grpc = true or command = [\"program\", \"arg\"...]")
	case h.HTTP != "" && !strings.HasPrefix(h.HTTP, "/"):
		return errdefs.Invalid("health.http", "%q must be a path starting with /", h.HTTP)
	case strings.ContainsAny(h.HTTP, " \t\r\n#"):
		return errdefs.Invalid("health.http", "%q must not contain white space or '#'", h.HTTP)
	case h.Interval.Duration <= 0:
		return errdefs.Invalid("health.interval", "%s must be more than 0", h.Interval.Duration)
	case h.Timeout.Duration <= 0:
		return errdefs.Invalid("health.timeout", "%s must be more than 0", h.Timeout.Duration)
	case h.Failures < 1:
		return errdefs.Invalid("health.failures", "%d must be at least 1", h.Failures)
	case h.FailureThreshold < 1:
		return errdefs.Invalid("health.failure_threshold", "%d must be at least 1", h.FailureThreshold)
	case h.SuccessThreshold < 1:
		return errdefs.Invalid("health.success_threshold", "%d must be at least 1", h.SuccessThreshold)
	case h.StartTimeout.Duration <= 0:
		return errdefs.Invalid("health.start_timeout", "%s must be more than 0", h.StartTimeout.Duration)
	}
	return nil
}

// validateCommand checks a command check: one kind of check only, a
// program to run, no NUL byte.
func (h *Health) validateCommand() error {
	switch {
	case h.HTTP != "" || h.TCP:
		other := "http"
		if h.TCP {
			other = "tcp"
		}
		return errdefs.Invalid("health.command", "health.command and health.%s exclude each other; set one", other)
	case len(h.Command) == 0 || strings.TrimSpace(h.Command[0]) == "":
		return errdefs.Invalid("health.command", "must name a program to run in the container, e.g. [\"/bin/sh\", \"-c\", \"test -f /tmp/ok\"]")
	case len(h.Command) > 64:
		return errdefs.Invalid("health.command", "has %d arguments; at most 64", len(h.Command))
	}
	for i, a := range h.Command {
		if strings.ContainsRune(a, 0) {
			return errdefs.Invalid(fmt.Sprintf("health.command[%d]", i), "must not contain a NUL byte")
		}
	}
	return nil
}

func validateVolumes(vols map[string]string) error {
	seen := map[string]string{}
	for _, name := range sortedKeys(vols) {
		p := vols[name]
		key := "volumes." + name
		switch {
		case !IsDNSLabel(name):
			return errdefs.Invalid(key, "volume name %q must be a DNS label: lowercase letters, digits and '-', starting with a letter", name)
		case !cleanAbs(p):
			return errdefs.Invalid(key, "%q must be an absolute, clean path in the container, not /", p)
		case underAny(p, "/proc", "/sys", "/dev"):
			return errdefs.Invalid(key, "%q is under /proc, /sys or /dev", p)
		case seen[p] != "":
			return errdefs.Invalid(key, "%q is already the path of volume %q", p, seen[p])
		}
		seen[p] = name
	}
	return nil
}

func validateEnv(env map[string]string) error {
	for _, k := range sortedKeys(env) {
		key := "env." + k
		switch {
		case !envKey.MatchString(k):
			return errdefs.Invalid(key, "%q must be an identifier: letters, digits and '_', not starting with a digit", k)
		case k == "PORT" || strings.HasPrefix(k, "SHOAL_"):
			return errdefs.Invalid(key, "%q is set by shoal; PORT comes from port", k)
		case strings.ContainsRune(env[k], 0):
			return errdefs.Invalid(key, "must not contain a NUL byte")
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// nodeName is what a node's name may be (the daemon's --node-name).
var nodeName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$`)

// validate checks the [placement] table of app.
func (p *Placement) validate(app string) error {
	names := func(key string, list []string, ok func(string) bool, what string) error {
		seen := map[string]bool{}
		for i, n := range list {
			k := fmt.Sprintf("placement.%s[%d]", key, i)
			switch {
			case !ok(n):
				return errdefs.Invalid(k, "%q is not %s", n, what)
			case seen[n]:
				return errdefs.Invalid(k, "%q is listed twice", n)
			}
			seen[n] = true
		}
		return nil
	}
	nodeOK := nodeName.MatchString
	for _, l := range []struct {
		key  string
		list []string
		ok   func(string) bool
		what string
	}{
		{"nodes", p.Nodes, nodeOK, "a node name (letters, digits, _.-)"},
		{"prefer", p.Prefer, nodeOK, "a node name (letters, digits, _.-)"},
		{"apart", p.Apart, IsDNSLabel, "an app name"},
		{"with", p.With, IsDNSLabel, "an app name"},
	} {
		if err := names(l.key, l.list, l.ok, l.what); err != nil {
			return err
		}
	}
	if len(p.Nodes) > 0 {
		for i, n := range p.Prefer {
			if !slices.Contains(p.Nodes, n) {
				return errdefs.Invalid(fmt.Sprintf("placement.prefer[%d]", i), "%q is not one of placement.nodes (%s): the replicas never run there", n, strings.Join(p.Nodes, ", "))
			}
		}
	}
	for i, a := range p.Apart {
		if a == app {
			return errdefs.Invalid(fmt.Sprintf("placement.apart[%d]", i), "%q is the app itself; its replicas keep apart already", a)
		}
		if slices.Contains(p.With, a) {
			return errdefs.Invalid(fmt.Sprintf("placement.apart[%d]", i), "%q is also in placement.with", a)
		}
	}
	for i, a := range p.With {
		if a == app {
			return errdefs.Invalid(fmt.Sprintf("placement.with[%d]", i), "%q is the app itself", a)
		}
	}
	return nil
}

// validateTCP checks listen against protocol: a TCP app has a port of its
// own on the proxy's address and nothing an HTTP route has (host names,
// stickiness by cookie, HTTPS).
func (c *Config) validateTCP() error {
	if !c.TCP() {
		if c.Listen != 0 {
			return errdefs.Invalid("listen", "is only for protocol = %q (the proxy's port for the app's TCP connections)", ProtocolTCP)
		}
		return nil
	}
	switch {
	case c.Listen == 0:
		return errdefs.Invalid("listen", "is required with protocol = %q: the port on the proxy's address whose connections go to the app", ProtocolTCP)
	case c.Listen < 1 || c.Listen > 65535:
		return errdefs.Invalid("listen", "%d must be a port number 1-65535", c.Listen)
	case len(c.Domains) > 0:
		return errdefs.Invalid("domains", "an app with protocol = %q is reached on its listen port, not by host name", ProtocolTCP)
	case c.Traffic.Sticky:
		return errdefs.Invalid("traffic.sticky", "needs HTTP (a cookie): an app with protocol = %q cannot be sticky", ProtocolTCP)
	case c.Health.HTTP != "" || c.Health.GRPC:
		return errdefs.Invalid("health", "an app with protocol = %q is checked over TCP or by a command, not over HTTP or gRPC", ProtocolTCP)
	case c.Scale.MaxConnections != 0:
		return errdefs.Invalid("scale.max_connections", "bounds the proxy's connections carrying HTTP requests; an app with protocol = %q gets one per client connection, which it does not bound", ProtocolTCP)
	}
	return nil
}
