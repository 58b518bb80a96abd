// Package appapi is the self API: the small HTTP API an app calls from
// inside its own replicas to steer its scaling. Every replica is given
// $SHOAL_API_URL (the daemon, on the replica's bridge gateway) and
// $SHOAL_TOKEN (a secret of that replica only); with them it may ask for
// one more replica of its revision (replicate), leave the route (halt),
// leave the app (die), publish a metric the autoscaler can target, and read
// its own state and its app's replicas.
//
// A call is authorized by "Authorization: Bearer $SHOAL_TOKEN" and by where
// it comes from: the token names one replica, and the connection must come
// from that replica's own address. An unknown token, or the token of a
// replica that is gone, gets 401; a token used from another address, or a
// call naming another app or replica, gets 403. Each refusal is logged and
// recorded as an event. The platform keeps the last word: the app's min
// and max bounds and a token bucket per app answer 409 with a JSON reason.
//
// The package holds the HTTP side only (authentication, the rate limit,
// JSON in and out, events); the serving controller does the work through
// the Platform interface. Only a SHA-256 hash of each token is kept.
package appapi
