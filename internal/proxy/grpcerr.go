package proxy

import (
	"net/http"
	"strconv"
	"strings"
)

// gRPC status codes of the proxy's own answers.
const (
	grpcUnknown          = 2
	grpcPermissionDenied = 7
	grpcUnimplemented    = 12
	grpcUnavailableCode  = 14 // grpcUnavailable as a number
	grpcInternal         = 13
	grpcUnauthenticated  = 16
)

// grpcStatusOf maps the HTTP status of a proxy's own answer to a gRPC
// status, as gRPC's HTTP mapping does (doc/http-grpc-status-mapping.md):
// 404 (no app) UNIMPLEMENTED, 429, 502, 503 and 504 UNAVAILABLE.
func grpcStatusOf(code int) int {
	switch code {
	case http.StatusBadRequest:
		return grpcInternal
	case http.StatusUnauthorized:
		return grpcUnauthenticated
	case http.StatusForbidden:
		return grpcPermissionDenied
	case http.StatusNotFound:
		return grpcUnimplemented
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return grpcUnavailableCode
	}
	return grpcUnknown
}

// writeFor writes the refusal as an answer to r: for a gRPC call (HTTP/2,
// Content-Type application/grpc) a trailers-only gRPC answer, 200 with
// grpc-status and grpc-message and no body, which a gRPC client reads as
// the call's status (it would read a JSON error as a protocol error);
// else write's JSON error. A redirect stays one.
func (f *refusal) writeFor(w http.ResponseWriter, r *http.Request) {
	if f.err == nil || f.location != "" || r.ProtoMajor != 2 || !isGRPC(r.Header) {
		f.write(w)
		return
	}
	h := w.Header()
	if f.retry {
		ra := retryAfter
		if f.retryAfter > 0 {
			ra = strconv.Itoa(f.retryAfter)
		}
		h.Set("Retry-After", ra)
	}
	h.Set("Content-Type", "application/grpc")
	h.Set("Grpc-Status", strconv.Itoa(grpcStatusOf(f.code)))
	h.Set("Grpc-Message", grpcMessage(f.err.Error()))
	w.WriteHeader(http.StatusOK)
}

// grpcMessage percent-encodes s as grpc-message is: bytes outside
// printable ASCII, and '%', as %XX.
func grpcMessage(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e || c == '%' {
			b.WriteString("%" + strings.ToUpper(strconv.FormatUint(uint64(c)|0x100, 16)[1:]))
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}
