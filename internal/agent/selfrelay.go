package agent

import (
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/shoal-run/shoal/internal/appapi"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/httperr"
)

// selfPrefix is where the leader serves the self API calls of replicas on
// other nodes: the call's own path follows (/v1/agent/self/v1/self/...).
const selfPrefix = Prefix + "self"

// Headers of a relayed self API call: the replica's own token (the
// Authorization header carries the cluster secret on the hop), the node
// whose bridge the call reached and the replica's address there.
const (
	selfTokenHeader = "Shoal-Self-Token"
	selfNodeHeader  = "Shoal-Self-Node"
	selfAddrHeader  = "Shoal-Self-Addr"
)

// ForwardSelf sends a self API call a replica of this node made to the
// leader, whose controllers know the replica's token and act on the call,
// and writes the leader's answer to w. It returns false, having written
// nothing, when this node leads (the call is served here).
func (f *Forwarder) ForwardSelf(w http.ResponseWriter, r *http.Request) bool {
	return f.forward(w, r, selfPrefix, func(in *http.Request, out http.Header) {
		tok, _ := strings.CutPrefix(in.Header.Get("Authorization"), "Bearer ")
		out.Del(selfTokenHeader)
		if tok = strings.TrimSpace(tok); tok != "" {
			out.Set(selfTokenHeader, tok)
		}
		out.Set(selfNodeHeader, f.Self)
		host, _, err := net.SplitHostPort(in.RemoteAddr)
		if err != nil {
			host = ""
		}
		out.Set(selfAddrHeader, host)
	})
}

// relayedSelf serves a self API call another node relayed: with this
// node's self API, the caller's token restored and its node and address
// taken from the relaying node (trusted: it holds the cluster secret).
func (s *Server) relayedSelf(w http.ResponseWriter, r *http.Request) {
	if s.Self == nil {
		httperr.WriteErr(w, fmt.Errorf("node %s serves no self API calls of other nodes: %w", s.Name, errdefs.ErrUnavailable))
		return
	}
	node := r.Header.Get(selfNodeHeader)
	ip := net.ParseIP(r.Header.Get(selfAddrHeader))
	if node == "" || ip == nil {
		httperr.Write(w, http.StatusBadRequest, fmt.Errorf("a relayed self API call needs %s and %s (an address)", selfNodeHeader, selfAddrHeader), "")
		return
	}
	in := r.Clone(appapi.WithOrigin(r.Context(), appapi.Origin{Node: node, IP: ip}))
	in.URL.Path = strings.TrimPrefix(r.URL.Path, selfPrefix)
	in.URL.RawPath = strings.TrimPrefix(r.URL.RawPath, selfPrefix)
	in.RequestURI = ""
	in.Header.Del("Authorization")
	if tok := r.Header.Get(selfTokenHeader); tok != "" {
		in.Header.Set("Authorization", "Bearer "+tok)
	}
	in.Header.Del(selfTokenHeader)
	s.Self.ServeHTTP(w, in)
}
