package proxy

import (
	"bytes"
	"errors"
	"net/http"
	"net/url"
	"strings"
)

// The h2c leg: a request for a replica whose route says route.ProtocolH2C
// (a gRPC server, or any cleartext HTTP/2 one) goes, whatever protocol its
// client spoke, as one stream of a connection of the endpoint's h2pool.
// The body streams both ways as it comes (a gRPC call's messages), each
// piece of the answer flushed to the client, and the answer's trailers
// (grpc-status) follow it. The retry contract is forward's: a request
// with a body, as every gRPC call is, is sent again only when its connect
// failed.

// grpcUnavailable is the status a gRPC answer cut short ends with: 14,
// UNAVAILABLE, which tells a gRPC client that the call may be tried again.
const grpcUnavailable = "14"

// sendH2 sends the request as one stream to st.ep's h2c replica and
// copies the answer to the client.
func (x *stdReq) sendH2(st *reqState) (sendResult, error) {
	pool := st.ep.h2
	w, r := x.w, x.r
	out := x.h2Request(st)
	var resp *http.Response
	var err error
	for try := 0; ; try++ {
		var cc *http.ClientConn
		cc, err = pool.get(st.Context, st.ep.addr)
		if err != nil {
			if st.Context.Err() != nil {
				st.code = statusClientGone
				return sendDone, nil
			}
			return sendRefused, err
		}
		defer pool.done(cc)
		resp, err = cc.RoundTrip(out)
		if err == nil || try > 0 || !unsent(err) {
			break
		}
		// The connection was closing (the replica's GOAWAY) before the
		// stream went out: once more, on another.
	}
	if err != nil {
		switch {
		case st.Context.Err() != nil:
			st.code = statusClientGone
		case x.st.upload != nil && x.st.upload.err != nil:
			x.fail(st, err)
		default:
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				x.fail(st, err)
				return sendDone, nil
			}
			return sendDied, err
		}
		return sendDone, nil
	}
	defer resp.Body.Close()
	st.code, st.head = resp.StatusCode, x.p.clock.Now()
	h := w.Header()
	for k, vs := range resp.Header {
		if passOn(k, nil) {
			h[k] = vs
		}
	}
	for k := range resp.Trailer {
		h.Add("Trailer", k)
	}
	grpc := isGRPC(resp.Header)
	if grpc {
		trailersOnly(h)
	}
	if v := st.setCookie(); v != "" {
		h.Add("Set-Cookie", v)
	}
	w.WriteHeader(resp.StatusCode)
	if f, ok := w.(http.Flusher); ok && grpc {
		f.Flush() // a gRPC stream's headers go before its first message
	}
	complete, backendErr := copyBody(w, resp.Body, true)
	if !complete {
		if !backendErr || r.Context().Err() != nil {
			return sendDone, nil
		}
		if grpc {
			// A cut (the replica's drain is over) or a replica gone:
			// the call ends with a status a gRPC client retries.
			h[http.TrailerPrefix+"Grpc-Status"] = []string{grpcUnavailable}
			h[http.TrailerPrefix+"Grpc-Message"] = []string{"the replica went away"}
			return sendDone, nil
		}
		// Cut the client's answer short rather than let it look whole.
		panic(http.ErrAbortHandler)
	}
	for k, vs := range resp.Trailer {
		h[http.TrailerPrefix+k] = vs
	}
	return sendDone, nil
}

// h2Request is the request to send to the h2c replica: x's method, path,
// Host, fields (hop-by-hop ones left out, but "TE: trailers", which gRPC
// needs) and body, with the forwarded fields, and the hop header when
// st.ep is another node's (its proxy, reached over h2c, streams too).
func (x *stdReq) h2Request(st *reqState) *http.Request {
	r := x.r
	u := &url.URL{Scheme: "http", Host: st.ep.addr, Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery}
	if u.Path == "" {
		u.Path = "/"
	}
	hd := make(http.Header, len(r.Header)+5)
	conn := r.Header["Connection"]
	for k, vs := range r.Header {
		if passOn(k, conn) && !forwardedHeader(k) && k != "Content-Length" && k != "Expect" && k != HopHeader {
			hd[k] = vs
		}
	}
	for _, v := range r.Header["Te"] {
		if strings.EqualFold(strings.TrimSpace(v), "trailers") {
			hd["Te"] = []string{"trailers"}
		}
	}
	rh := r.Header
	sent := sentFields[string]{xff: rh["X-Forwarded-For"], host: rh["X-Forwarded-Host"],
		proto: rh["X-Forwarded-Proto"], realIP: rh["X-Real-Ip"], fwd: rh["Forwarded"]}
	fw := forwardedOf(r, x.p.trusted)
	var buf [512]byte
	addLines(hd, appendForwarded(buf[:0], &fw, r.Host, &sent, st.hop))
	if st.ep.node != "" {
		hd[HopHeader] = []string{x.p.hopValue(st.ep, r.Host)}
	}
	body := r.Body
	if r.ContentLength == 0 || body == nil {
		body = http.NoBody
	}
	out := &http.Request{Method: r.Method, URL: u, Proto: "HTTP/2.0", ProtoMajor: 2, Header: hd, Host: r.Host,
		Body: body, ContentLength: r.ContentLength, Trailer: r.Trailer}
	if body == http.NoBody {
		out.ContentLength = 0
	}
	return out.WithContext(st.Context)
}

// addLines adds to h the fields of b, lines "Name: value\r\n".
func addLines(h http.Header, b []byte) {
	for len(b) > 0 {
		line, rest, _ := bytes.Cut(b, []byte("\r\n"))
		b = rest
		if k, v, ok := bytes.Cut(line, []byte(": ")); ok {
			h[string(k)] = append(h[string(k)], string(v))
		}
	}
}

// unsent tells whether a RoundTrip error says the request never left: its
// connection was closed or going away before the stream was opened.
func unsent(err error) bool {
	s := err.Error()
	return strings.Contains(s, "client conn not usable") || strings.Contains(s, "client conn is closed")
}

// trailersOnly moves the status of a gRPC answer that came in its headers
// (a "trailers-only" answer: one HEADERS frame that ends the stream) to
// the trailers of h, where a gRPC client reads it once the answer's
// headers went out on their own.
func trailersOnly(h http.Header) {
	for _, k := range [...]string{"Grpc-Status", "Grpc-Message", "Grpc-Status-Details-Bin"} {
		if vs, ok := h[k]; ok {
			delete(h, k)
			h[http.TrailerPrefix+k] = vs
		}
	}
}

// isGRPC tells whether an answer is a gRPC call's.
func isGRPC(h http.Header) bool {
	return strings.HasPrefix(h.Get("Content-Type"), "application/grpc")
}
