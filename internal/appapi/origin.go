package appapi

import (
	"context"
	"net"
	"net/http"
)

// Origin is where a call came from: the node whose bridge it reached and
// the caller's address there.
type Origin struct {
	Node string
	IP   net.IP
}

type originKey struct{}

// WithOrigin marks ctx as carrying a call another node received from one
// of its replicas and relayed (behind the cluster secret): the self API
// checks the caller against o instead of the connection's address.
func WithOrigin(ctx context.Context, o Origin) context.Context {
	return context.WithValue(ctx, originKey{}, o)
}

// origin returns where r came from: the relaying node's word if it was
// relayed, else this node and the connection's address.
func (s *Server) origin(r *http.Request) Origin {
	if o, ok := r.Context().Value(originKey{}).(Origin); ok {
		return o
	}
	return Origin{Node: s.Node, IP: remoteIP(r)}
}
