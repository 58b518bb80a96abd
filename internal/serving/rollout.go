package serving

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/shoal-run/shoal/internal/store"
)

// split divides n replicas between revisions by weight (largest remainder
// first), and gives each revision at least floor, taken from the largest
// share while that stays above floor.
func split(n int, weights map[int]int, floor int) map[int]int {
	out := make(map[int]int, len(weights))
	total := 0
	for _, w := range weights {
		total += w
	}
	if total == 0 {
		return out
	}
	type rem struct{ rev, r int }
	var rems []rem
	given := 0
	for rev, w := range weights {
		out[rev] = n * w / total
		given += out[rev]
		rems = append(rems, rem{rev, n * w % total})
	}
	sort.Slice(rems, func(i, j int) bool {
		if rems[i].r != rems[j].r {
			return rems[i].r > rems[j].r
		}
		return rems[i].rev > rems[j].rev
	})
	for i := 0; given < n && i < len(rems); i++ {
		out[rems[i].rev]++
		given++
	}
	// Raise the revisions below floor, taking from the largest share, so
	// that the total stays n where n allows (the autoscaler sees what it
	// asked for, or it would ask again).
	for rev := range out {
		for out[rev] < floor {
			out[rev]++
			top := rev
			for r, k := range out {
				if k > out[top] || (k == out[top] && r > top) {
					top = r
				}
			}
			if top != rev && out[top] > floor {
				out[top]--
			}
		}
	}
	return out
}

// fetchRevision reads revision n from the store unless the controller
// has it, without ctl.mu.
func (ctl *appCtl) fetchRevision(ctx context.Context, n int) error {
	ctl.mu.Lock()
	_, ok := ctl.revs[n]
	ctl.unlock()
	if ok {
		return nil
	}
	kv, err := ctl.m.o.Store.Get(ctx, store.RevisionKey(ctl.name, n))
	if err != nil {
		return fmt.Errorf("app %q: revision %d: %w", ctl.name, n, err)
	}
	var rv revisionRecord
	if err := json.Unmarshal(kv.Value, &rv); err != nil {
		return fmt.Errorf("app %q: revision %d: %w", ctl.name, n, err)
	}
	ctl.mu.Lock()
	ctl.revs[n] = rv
	ctl.unlock()
	return nil
}

// setCurrent makes rv the app's current revision. The app's domains and
// [https] stay as they are: they are the app's routing state, claimed in
// the store by the deploy that set them, not the revision's (they are
// left out of its hash), so going back to a revision never takes back a
// domain the app gave away. ctl.mu is held.
func (ctl *appCtl) setCurrent(rv revisionRecord) {
	cfg := rv.Config
	cfg.Domains, cfg.HTTPS = ctl.rec.Config.Domains, ctl.rec.Config.HTTPS
	ctl.rec.Revision, ctl.rec.Config, ctl.rec.Manifest = rv.N, cfg, rv.Manifest
	ctl.rec.Digest, ctl.rec.Hash = rv.Digest, rv.Hash
	ctl.recChanged()
	if err := ctl.scaler.d.SetPolicy(policy(ctl.rec)); err != nil {
		ctl.m.log.Warn("serving: autoscale policy", "app", ctl.name, "err", err)
	}
}

func progressing(ro *rollout) bool { return ro != nil && ro.State == rolloutProgressing }

// endRollout ends a rollout whose revision never became ready: the app's
// current revision goes back to the one the rollout started from, whose
// replicas have kept the traffic; with none to go back to, the rollout
// failed. A rollback the operator asked for fails too: the app stays on
// the revision asked for (its replicas keep failing and backing off
// until another deploy or rollback), never going back to the one left.
// ctl.mu is held.
func (ctl *appCtl) endRollout(now time.Time, why string) {
	ro := new(rollout)
	*ro = *ctl.rec.Rollout
	ctl.rec.Rollout = ro
	ro.DoneAt, ro.Reason = &now, why
	ctl.roFailures = 0
	ctl.saveApp()
	if ro.Requested {
		ro.State = rolloutFailed
		ctl.m.emit("rollback", ctl.name, "", fmt.Sprintf("rollback to revision %d failed, the app stays on it: %s", ro.Revision, why), nil)
		return
	}
	var prev revisionRecord
	err := fmt.Errorf("no earlier revision")
	if ro.From > 0 {
		prev, err = ctl.revision(ro.From)
	}
	if err != nil {
		ro.State = rolloutFailed
		ctl.m.emit("rollout", ctl.name, "", fmt.Sprintf("revision %d failed: %s", ro.Revision, why), nil)
		return
	}
	ro.State = rolloutRolledBack
	ctl.setCurrent(prev)
	// The failures were the new revision's: the one that comes back
	// starts at once.
	ctl.failures, ctl.strikes, ctl.backoff = 0, 0, time.Time{}
	ctl.publish()
	ctl.m.emit("rollback", ctl.name, "", fmt.Sprintf("revision %d rolled back to revision %d: %s", ro.Revision, ro.From, why), nil)
}

// trafficString is a traffic assignment as a short text: "3=90 4=10".
func trafficString(ts []trafficShare) string {
	parts := make([]string, 0, len(ts))
	for _, t := range ts {
		parts = append(parts, fmt.Sprintf("%d=%d", t.Revision, t.Percent))
	}
	return strings.Join(parts, " ")
}
