package serving

import "context"

// Confiner runs an app's containers in a user namespace of the app's own
// (see internal/userns); the node confines them (localnode's Confiner),
// serving gives back the app's host ids.
type Confiner interface {
	// Release gives back app's host ids once the app is deleted.
	Release(ctx context.Context, app string) error
}
