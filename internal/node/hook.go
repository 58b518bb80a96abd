package node

import (
	"os"

	"github.com/shoal-run/shoal/internal/manifest"
)

// Hook is an app's merge hook to run on this host: a short-lived container
// of the app's image that sees a gone replica's state and the volume it
// merges into, with the app's limits and no network. It is not recorded: a
// daemon that dies while it runs leaves an orphan that the next removes.
type Hook struct {
	ID      string // its container's
	App     string
	Replica string // the replica whose state it merges
	// Layers and User are the image's: its snapshot directories (bottom
	// first) and the user it runs as.
	Layers []string
	User   string
	Args   []string
	Env    []string // its whole environment
	Mounts []Mount
	// Resources are the app's: the hook's CPU, memory and pids limits.
	Resources manifest.Resources
	// Log takes its stdout and stderr.
	Log *os.File
}
