// Package agent is how the nodes of a cluster talk to each other: a Server
// that each node mounts on its TCP API under /v1/agent/ (and /v2/ for its
// image store), and a Client that reaches another node by name at the
// address its record advertises.
//
// Every request between nodes carries the cluster secret (Authorization:
// Bearer, or as the password of Basic for an image puller); a node answers
// a request without it, or with a wrong one, 401 and does nothing else.
// The API token of users is never accepted here, nor the cluster secret on
// the user API.
package agent
