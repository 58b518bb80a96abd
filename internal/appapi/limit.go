package appapi

import (
	"math"
	"sync"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
)

// Rate is a token bucket's size and refill.
type Rate struct {
	Burst     float64 // tokens when full
	PerSecond float64 // tokens added each second
}

// Default rates, per app: scaling calls (replicate, halt, die) are rare by
// nature; reports (metrics, GET /v1/self) come from every replica every
// second or so.
var (
	DefaultScaleRate  = Rate{Burst: 10, PerSecond: 2}
	DefaultReportRate = Rate{Burst: 100, PerSecond: 50}
	// DefaultDenyRate bounds the refused authentications recorded per
	// source address: beyond it they are answered but not logged one by
	// one, so a replica cannot flood the event log with forged tokens.
	DefaultDenyRate = Rate{Burst: 10, PerSecond: 1}
)

// limiter is a set of token buckets, one per key, on an injectable clock.
type limiter struct {
	rate  Rate
	clock clock.Clock

	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

func newLimiter(r Rate, c clock.Clock) *limiter {
	return &limiter{rate: r, clock: c, buckets: map[string]*bucket{}}
}

// take takes one token of key's bucket. When none is left it reports how
// long until one is.
func (l *limiter) take(key string) (ok bool, wait time.Duration) {
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[key]
	if b == nil {
		if len(l.buckets) >= 4096 {
			l.sweep(now)
		}
		b = &bucket{tokens: l.rate.Burst, at: now}
		l.buckets[key] = b
	}
	l.refill(b, now)
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	if l.rate.PerSecond <= 0 {
		return false, time.Hour
	}
	return false, time.Duration((1 - b.tokens) / l.rate.PerSecond * float64(time.Second))
}

func (l *limiter) refill(b *bucket, now time.Time) {
	if d := now.Sub(b.at); d > 0 {
		b.tokens = math.Min(l.rate.Burst, b.tokens+d.Seconds()*l.rate.PerSecond)
		b.at = now
	}
}

// sweep forgets full buckets: they are what a new bucket would be.
func (l *limiter) sweep(now time.Time) {
	for k, b := range l.buckets {
		if l.refill(b, now); b.tokens >= l.rate.Burst {
			delete(l.buckets, k)
		}
	}
}
