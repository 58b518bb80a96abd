package serving

import (
	"context"
	"os"

	"github.com/shoal-run/shoal/internal/runtime"
)

// Confiner runs an app's containers in a user namespace of the app's own
// (see internal/userns).
type Confiner interface {
	// Confine changes spec, a container of app, to run in app's user
	// namespace, claiming the app's host ids the first time.
	Confine(ctx context.Context, app string, spec *runtime.Spec) error
	// Release gives back app's host ids once the app is deleted.
	Release(ctx context.Context, app string) error
}

// ownLog gives the log file of a container in a user namespace to the
// container's root: a program that opens /dev/stdout or /dev/stderr (as
// nginx does) opens the file again, as that root.
func ownLog(f *os.File, spec *runtime.Spec) error {
	if spec.UserNS == nil {
		return nil
	}
	return f.Chown(int(spec.UserNS.HostID), int(spec.UserNS.HostID))
}
