package acme

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/proxy"
	"github.com/shoal-run/shoal/internal/store"
)

// provider is lego's challenge.Provider for HTTP-01 or TLS-ALPN-01: it
// puts a challenge in the store (store.ACMEChallengeKey), from where
// every node's Follower gives it to its proxy, and waits until this
// node's proxy has it.
type provider struct {
	typ     string
	w       store.Store // the manager's writes
	applied *Follower
}

func (p *provider) Present(ctx context.Context, domain, token, keyAuth string) error {
	b, err := json.Marshal(proxy.Challenge{Type: p.typ, Domain: domain, Token: token, KeyAuth: keyAuth})
	if err != nil {
		return err
	}
	rev, err := p.w.Put(ctx, store.ACMEChallengeKey(token), b)
	if err != nil {
		return fmt.Errorf("challenge for %s: %w", domain, err)
	}
	if p.applied == nil {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := p.applied.WaitApplied(wctx, token, rev); err != nil {
		return fmt.Errorf("challenge for %s: not given to the proxy: %w", domain, err)
	}
	return nil
}

func (p *provider) CleanUp(ctx context.Context, domain, token, keyAuth string) error {
	if err := p.w.Delete(context.WithoutCancel(ctx), store.ACMEChallengeKey(token)); err != nil {
		return fmt.Errorf("challenge for %s: %w", domain, err)
	}
	return nil
}

// Pusher gives a proxy the whole set of challenges it answers
// (dataplane.Client.SetChallenges, or proxy.Proxy's in tests).
type Pusher func(ctx context.Context, list []proxy.Challenge) error

// Follower keeps a node's proxy answering the challenges in the store:
// it lists store.ACMEChallengesPrefix, pushes the set, and again after
// each change. Every node runs one; the node that orders waits on its
// own (WaitApplied) before it asks the CA to validate.
type Follower struct {
	st   store.Store
	push Pusher
	clk  clock.Clock
	log  *slog.Logger

	mu      sync.Mutex
	applied map[string]int64 // token → ModRev of the challenge pushed
	changed chan struct{}    // closed and replaced after each push
}

// NewFollower returns a Follower of st's challenges pushing to push.
func NewFollower(st store.Store, push Pusher, clk clock.Clock, log *slog.Logger) *Follower {
	if clk == nil {
		clk = clock.Real{}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Follower{st: st, push: push, clk: clk, log: log, applied: map[string]int64{}, changed: make(chan struct{})}
}

// Run follows the store until ctx ends. A push that fails is tried
// again a second later.
func (f *Follower) Run(ctx context.Context) {
	for ctx.Err() == nil {
		ch, err := f.st.Watch(ctx, store.ACMEChallengesPrefix)
		if err != nil {
			f.log.Warn("acme: cannot watch the challenges", "err", err)
			f.sleep(ctx, time.Second)
			continue
		}
		ok := f.sync(ctx)
		for ctx.Err() == nil {
			var tick <-chan time.Time
			var tm clock.Timer
			if !ok {
				tm = f.clk.NewTimer(time.Second)
				tick = tm.C()
			}
			select {
			case _, open := <-ch:
				if !open {
					ch = nil
				}
			case <-tick:
			case <-ctx.Done():
			}
			if tm != nil {
				tm.Stop()
			}
			if ch == nil {
				break
			}
			// Take every change queued, then list once.
			for drained := false; !drained; {
				select {
				case _, open := <-ch:
					if !open {
						drained = true
					}
				default:
					drained = true
				}
			}
			ok = f.sync(ctx)
		}
	}
}

func (f *Follower) sleep(ctx context.Context, d time.Duration) {
	tm := f.clk.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C():
	case <-ctx.Done():
	}
}

// sync lists the challenges and pushes them; false when that failed.
func (f *Follower) sync(ctx context.Context) bool {
	kvs, err := f.st.List(ctx, store.ACMEChallengesPrefix)
	if err != nil {
		if ctx.Err() == nil {
			f.log.Warn("acme: cannot list the challenges", "err", err)
		}
		return false
	}
	list := make([]proxy.Challenge, 0, len(kvs))
	revs := make(map[string]int64, len(kvs))
	for _, kv := range kvs {
		var c proxy.Challenge
		if err := json.Unmarshal(kv.Value, &c); err != nil {
			f.log.Warn("acme: a challenge record cannot be read", "key", kv.Key, "err", err)
			continue
		}
		list = append(list, c)
		revs[strings.TrimPrefix(kv.Key, store.ACMEChallengesPrefix)] = kv.ModRev
	}
	slices.SortFunc(list, func(a, b proxy.Challenge) int { return strings.Compare(a.Token, b.Token) })
	if err := f.push(ctx, list); err != nil {
		if ctx.Err() == nil {
			f.log.Warn("acme: the challenges did not reach the proxy", "err", err)
		}
		return false
	}
	f.mu.Lock()
	f.applied = revs
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
	return true
}

// WaitApplied returns once the proxy answers challenge token as written
// at store revision rev (or later).
func (f *Follower) WaitApplied(ctx context.Context, token string, rev int64) error {
	for {
		f.mu.Lock()
		got, ch := f.applied[token], f.changed
		f.mu.Unlock()
		if got >= rev {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
