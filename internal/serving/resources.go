package serving

import "github.com/shoal-run/shoal/internal/units"

// memoryBytes is the replica memory limit of cfg (0: none). The manifest was
// validated, so the size parses.
func memoryBytes(cfg Config) int64 {
	if cfg.Resources.Memory == "" {
		return 0
	}
	n, _ := units.ParseBytes(cfg.Resources.Memory)
	return n
}

// maxBody is the request body limit of cfg (0: the proxy's default).
func maxBody(cfg Config) int64 {
	if cfg.Resources.MaxBody == "" {
		return 0
	}
	n, _ := units.ParseBytes(cfg.Resources.MaxBody)
	return n
}
