package proxy

import (
	"log"
	"strings"
	"sync"
	"time"
)

// Log lines about client mistakes (a refused hop header, a head over a
// limit, a malformed body, net/http's own complaints) go through a token
// bucket: a client that repeats a mistake cannot fill the proxy's log. The
// lines dropped are counted and reported in one line once lines pass again.
const (
	mistakeBurst = 10
	mistakeEvery = time.Second // one more line may pass each
)

// mistakeLog is the token bucket.
type mistakeLog struct {
	mu         sync.Mutex
	tokens     int
	last       time.Time // when the bucket was last filled
	suppressed int
}

// allow takes a token at now; it returns whether the line passes and how
// many lines were dropped before it.
func (m *mistakeLog) allow(now time.Time) (bool, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.last.IsZero() {
		m.tokens, m.last = mistakeBurst, now
	}
	if d := now.Sub(m.last); d >= mistakeEvery {
		n := int(d / mistakeEvery)
		m.tokens = min(mistakeBurst, m.tokens+n)
		m.last = m.last.Add(time.Duration(n) * mistakeEvery)
	}
	if m.tokens == 0 {
		m.suppressed++
		return false, 0
	}
	m.tokens--
	n := m.suppressed
	m.suppressed = 0
	return true, n
}

// clientMistake logs a warning about something a client did wrong, within
// the rate limit.
func (p *Proxy) clientMistake(msg string, args ...any) {
	ok, dropped := p.mistakes.allow(p.clock.Now())
	if !ok {
		return
	}
	if dropped > 0 {
		p.log.Warn("proxy: log lines about client mistakes suppressed", "lines", dropped)
	}
	p.log.Warn(msg, args...)
}

// mistakeWriter takes the lines net/http logs (mostly about clients) into
// clientMistake.
type mistakeWriter struct{ p *Proxy }

func (w mistakeWriter) Write(b []byte) (int, error) {
	w.p.clientMistake("proxy: " + strings.TrimSuffix(string(b), "\n"))
	return len(b), nil
}

func mistakeLogger(p *Proxy) *log.Logger { return log.New(mistakeWriter{p}, "", 0) }
