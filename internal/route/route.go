// Package route holds what serving and the proxy share of an app's routing:
// the Route serving publishes for each app (its ready endpoints, traffic
// weights, stickiness, limits and own domains), the certificates (Cert)
// the proxy serves over TLS, and the Load the proxy reports back. All
// travel as JSON over the proxy process's control socket, so their field
// names are a wire format: a daemon and a proxy of another build read them.
package route

import "time"

// Defaults for the zero values of a Route.
const (
	DefaultMaxBodyBytes = 10 << 20
	DefaultQueueLimit   = 100
	DefaultQueueTimeout = 30 * time.Second
	// DefaultWebSocketTimeout closes a WebSocket idle this long.
	DefaultWebSocketTimeout = 5 * time.Minute
	// DefaultMaxConns bounds the connections carrying requests to one
	// replica on the proxy's node.
	DefaultMaxConns = 32
)

// StickyCookie is the name of the cookie that keeps a client on a replica
// of a sticky route; its value is the endpoint's ID.
const StickyCookie = "shoal-replica"

// Endpoint is one ready replica. IDs are unique across apps.
type Endpoint struct {
	ID   string
	Addr string // host:port
	// Revision is the app revision the replica runs; Route.Weights refers
	// to it.
	Revision int
	// Node is the cluster node the replica runs on; "" on a single host.
	Node string `json:",omitempty"`
	// Protocol is how the proxy speaks to the replica: "" for HTTP/1.1,
	// ProtocolH2C for cleartext HTTP/2 with prior knowledge (gRPC too).
	// Another node's proxy is always reached over HTTP/1.1.
	Protocol string `json:",omitempty"`
}

// ProtocolH2C is Endpoint.Protocol of a replica spoken to in cleartext
// HTTP/2.
const ProtocolH2C = "h2c"

// Route is one app's routing entry.
type Route struct {
	App       string
	Endpoints []Endpoint // ready replicas only
	// MaxBodyBytes bounds a request body; 0 means DefaultMaxBodyBytes and a
	// negative value means no limit.
	MaxBodyBytes int64
	// QueueLimit is how many requests are held while the app has no
	// endpoint; 0 means DefaultQueueLimit.
	QueueLimit int
	// QueueTimeout is how long a request is held; 0 means
	// DefaultQueueTimeout. Then it is answered 503 with Retry-After.
	QueueTimeout time.Duration
	// Unavailable, when not empty, answers every request 503 with this
	// reason (e.g. "app is being deleted").
	Unavailable string
	// Weights maps a revision to its share of the traffic, in percent. Nil
	// or empty: every endpoint alike. A request goes to a revision drawn by
	// weight among those with weight > 0 and at least one endpoint (their
	// weights renormalised); if none has an endpoint, to any endpoint.
	Weights map[int]int
	// Sticky keeps a client on the endpoint it first reached: the answer
	// sets the cookie StickyCookie=<endpoint ID>, and a request that
	// carries it goes to that endpoint while it is in the route, whatever
	// the weights.
	Sticky bool
	// Capacity is how many requests in flight an endpoint takes before a
	// proxy that has endpoints on its own node and on others sends to one
	// of the others' (a less loaded one); 0: the own node's always come
	// first.
	Capacity int `json:",omitempty"`
	// Frozen is how many replicas of the routed revisions are frozen: a
	// request held while there is one waits for a thaw, not a start.
	Frozen int
	// Starting is how many replicas of the routed revisions are being
	// started, 0 while the app is failing (its replicas failed since the
	// last one was ready). While one is, a held request's queue timeout
	// does not run;
	// a start that ends without a ready replica answers the requests it
	// held at once.
	Starting int `json:",omitempty"`
	// MaxConns bounds the connections carrying requests that a proxy
	// opens to one replica on its own node (shoal.toml's [scale]
	// max_connections), fixed when the replica's endpoint is made; 0
	// means DefaultMaxConns.
	MaxConns int `json:",omitempty"`
	// Failing, when not empty, says why the app has no replica and none
	// can be ready soon: its replicas fail, and the next start waits for
	// its back-off until RetryAt. Until then a request that finds no
	// endpoint, none starting and none frozen is answered 503 at once,
	// with this reason and Retry-After set to the seconds until RetryAt.
	Failing string    `json:",omitempty"`
	RetryAt time.Time `json:",omitzero"`
	// WebSocketTimeout closes a WebSocket through which nothing passed
	// for this long (with a close frame, status 1001), so that its
	// replica can go idle; 0 means DefaultWebSocketTimeout.
	WebSocketTimeout time.Duration `json:",omitempty"`
	// Domains are the app's own host names (shoal.toml's domains): the
	// proxy routes them to it beside <app>.localhost and <app>.<domain>.
	Domains []string `json:",omitempty"`
	// KeepHTTP answers plain HTTP requests to a host with a certificate
	// as any other, without the redirect to HTTPS ([https] redirect =
	// false); NoHSTS leaves out Strict-Transport-Security on HTTPS
	// ([https] hsts = false).
	KeepHTTP bool `json:",omitempty"`
	NoHSTS   bool `json:",omitempty"`
	// TCPPort, when set, makes the route a TCP one (shoal.toml's protocol
	// = "tcp" and listen): the proxy takes connections on this port of
	// its address and relays each, as it is, to the endpoint on its node
	// with the fewest open; no HTTP request reaches the app.
	TCPPort int `json:",omitempty"`
}

// Cert is a certificate the proxy serves over TLS, as the daemon pushes
// it to the proxy process: the names it serves (a "*.example.test"
// wildcard among them serves one label under example.test), the chain
// (leaf first) and its key in PEM, and an OCSP response (DER) to staple
// when there is one.
type Cert struct {
	Domains []string `json:"domains"`
	CertPEM []byte   `json:"cert_pem"`
	KeyPEM  []byte   `json:"key_pem"`
	OCSP    []byte   `json:"ocsp,omitempty"`
}

// Load is the proxy's view of one app's traffic.
type Load struct {
	InFlight int // including Queued
	Queued   int
	Requests uint64 // since the proxy added the app
	// LastRequest is when a request last arrived or finished.
	LastRequest time.Time
	// Endpoints holds the app's routed endpoints and the ones that left
	// the route but still have requests in flight.
	Endpoints map[string]EndpointLoad
	// TCP is the address a TCP app's route listens on; TCPError, when
	// it has none, says why (the port is another app's, or taken).
	TCP      string `json:",omitempty"`
	TCPError string `json:",omitempty"`
}

// EndpointLoad is the proxy's view of one endpoint's traffic. It survives
// route changes.
type EndpointLoad struct {
	InFlight int
	Requests uint64
	// Answered counts the requests the replica answered with a status
	// below 500: the proof, between health checks, that it is alive.
	Answered    uint64    `json:",omitempty"`
	LastRequest time.Time // when a request to it last started or ended
}
