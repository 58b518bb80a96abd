// Package serving runs apps: it turns an app's shoal.toml into replicas
// (containers on the runtime), keeps each replica on the homeostasis ladder
// (starting, ready, frozen, stopped, draining), wakes apps for the proxy,
// applies the autoscaler's decisions and records what it does in the store.
package serving

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
	// Command replaces the image's command (entrypoint kept) when set.
	Command   []string          `toml:"command"`
	Scale     Scale             `toml:"scale"`
	Resources Resources         `toml:"resources"`
	Health    Health            `toml:"health"`
	Volumes   map[string]string `toml:"volumes"` // volume name → path in the container
	Env       map[string]string `toml:"env"`
}

// Scale is the [scale] table.
type Scale struct {
	Min               int      `toml:"min"`
	Max               int      `toml:"max"`
	TargetConcurrency float64  `toml:"target_concurrency"`
	IdleTimeout       Duration `toml:"idle_timeout"`
	FreezeTimeout     Duration `toml:"freeze_timeout"`
	MaxLifetime       Duration `toml:"max_lifetime"`
	// Queue bounds the requests held while the app wakes; QueueTimeout is
	// how long one is held before a 503.
	Queue        int      `toml:"queue"`
	QueueTimeout Duration `toml:"queue_timeout"`
	// DrainTimeout bounds how long a draining replica's in-flight requests
	// may take before it is sent SIGTERM.
	DrainTimeout Duration `toml:"drain_timeout"`
}

// Resources is the [resources] table.
type Resources struct {
	CPU    float64 `toml:"cpu"`     // cores, the starting quota
	MaxCPU float64 `toml:"max_cpu"` // vertical scaling's ceiling
	Memory string  `toml:"memory"`  // "256Mi"
	Pids   int64   `toml:"pids"`
	// MaxBody limits a request body ("10Mi").
	MaxBody string `toml:"max_body"`
}

// Health is the [health] table: an HTTP path or a TCP check of Port.
type Health struct {
	HTTP     string   `toml:"http"`
	TCP      bool     `toml:"tcp"`
	Interval Duration `toml:"interval"`
	Timeout  Duration `toml:"timeout"`
	// Failures in a row that take a ready replica out of the route table.
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
