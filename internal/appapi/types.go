package appapi

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net"
	"time"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// Environment variables every replica is given.
const (
	EnvURL   = "SHOAL_API_URL"
	EnvToken = "SHOAL_TOKEN"
)

// DefaultPort is where the daemon serves the self API on the bridge
// gateway unless told otherwise.
const DefaultPort = 7071

// MaxReplicateWait bounds how long a replicate call waits for the replica
// it started to be ready, whatever the app's start_timeout; then it answers
// with the replica still starting. A server of the self API gives its
// answers longer than this to be written.
const MaxReplicateWait = 110 * time.Second

// tokenBytes is the size of a replica's secret before encoding.
const tokenBytes = 32

// NewToken returns a fresh random token for one replica and its hash, the
// only form in which the platform keeps it.
func NewToken() (token, hash string) {
	b := make([]byte, tokenBytes)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("appapi: random token: %v", err))
	}
	token = base64.RawURLEncoding.EncodeToString(b)
	return token, HashToken(token)
}

// HashToken is the hex SHA-256 of a token.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// Caller is the replica a token belongs to.
type Caller struct {
	App     string
	Replica string
	// IP is the replica's address on the bridge; calls must come from it.
	IP net.IP
	// Node is the node the replica runs on in a cluster ("" on one host);
	// calls must reach that node's bridge.
	Node string
	// Gone is set for the token of a replica that no longer exists.
	Gone bool
}

// Replica is one replica as the self API shows it.
type Replica struct {
	ID       string `json:"id"`
	Revision int    `json:"revision"`
	State    string `json:"state"`
	Addr     string `json:"addr,omitempty"`
}

// Self is the body of GET /v1/self.
type Self struct {
	ID       string    `json:"id"`
	App      string    `json:"app"`
	Revision int       `json:"revision"`
	State    string    `json:"state"`
	Min      int       `json:"min"`
	Max      int       `json:"max"`
	Replicas []Replica `json:"replicas"`
	// Metrics are the values this replica published last, by name.
	Metrics map[string]float64 `json:"metrics,omitempty"`
}

// Result is the body of a successful replicate, halt or die.
type Result struct {
	// Replica is the replica the call made or changed: the new one for
	// replicate, the caller for halt and die.
	Replica Replica `json:"replica"`
	// How says what was done: "thawed", "started", "halted", "draining".
	How string `json:"how"`
	// Seconds is how long the new replica took to be ready (replicate).
	Seconds float64 `json:"seconds,omitempty"`
}

// Refusal is a call the platform turns down to keep its bounds: the
// answer is 409 with Reason ("max", "min", "rate", "state", "backoff").
type Refusal struct {
	Reason string
	Msg    string
	// RetryAfter, in seconds, is sent as Retry-After when above 0.
	RetryAfter int
}

func (r *Refusal) Error() string { return r.Msg }

// Is makes a Refusal match errdefs.ErrConflict.
func (r *Refusal) Is(target error) bool { return target == errdefs.ErrConflict }

// Refuse returns a Refusal with a formatted message.
func Refuse(reason, format string, args ...any) error {
	return &Refusal{Reason: reason, Msg: fmt.Sprintf(format, args...)}
}

// Error is the JSON body of every failed call.
type Error struct {
	Error string `json:"error"`
	// Reason is a short code a program can act on: "unauthorized",
	// "forbidden", "max", "min", "rate", "state", "backoff", "invalid",
	// "not_found", "unavailable".
	Reason string `json:"reason"`
	Field  string `json:"field,omitempty"`
}

// MetricRequest is the body of POST /v1/self/metrics.
type MetricRequest struct {
	Name  string   `json:"name"`
	Value *float64 `json:"value"`
	// App and Replica, when given, must name the caller.
	App     string `json:"app,omitempty"`
	Replica string `json:"replica,omitempty"`
}

// CallRequest is the optional body of replicate, halt and die.
type CallRequest struct {
	App     string `json:"app,omitempty"`
	Replica string `json:"replica,omitempty"`
}
