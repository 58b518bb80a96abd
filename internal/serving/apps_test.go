package serving

import (
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/manifest"
)

// A deploy's rollout starts from the revision that keeps the traffic: the
// previous one, even while its own rollout is still in progress when it
// took the traffic from the start (a new app's first revision); the
// previous rollout's own start when that revision never took any.
func TestNextRecordFrom(t *testing.T) {
	now := time.Unix(1e9, 0)
	for _, c := range []struct {
		name string
		rec  appRecord
		from int
	}{
		{"a new app", appRecord{}, 0},
		{"after a rollout that is done", appRecord{Revision: 1, Traffic: []trafficShare{{1, 100}},
			Rollout: &rollout{Revision: 1, State: rolloutDone}}, 1},
		{"a new app's first revision still rolling out", appRecord{Revision: 1, Traffic: []trafficShare{{1, 100}},
			Rollout: &rollout{Revision: 1, State: rolloutProgressing}}, 1},
		{"a revision rolling out without traffic", appRecord{Revision: 2, Traffic: []trafficShare{{1, 100}},
			Rollout: &rollout{Revision: 2, From: 1, State: rolloutProgressing}}, 1},
		// No assignment stored: all of it goes to the current revision.
		{"a revision rolling out, no traffic assignment stored", appRecord{Revision: 2,
			Rollout: &rollout{Revision: 2, From: 1, State: rolloutProgressing}}, 2},
	} {
		c.rec.Hash = "an older config"
		rec, _, newRev := nextRecord(c.rec, manifest.Config{}, "", "", now)
		if !newRev || rec.Revision != c.rec.Revision+1 || rec.Rollout == nil || rec.Rollout.From != c.from {
			t.Errorf("%s: revision %d (new %v), rollout %+v, want from %d", c.name, rec.Revision, newRev, rec.Rollout, c.from)
		}
	}
}
