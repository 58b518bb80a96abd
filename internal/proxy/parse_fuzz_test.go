package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"net/textproto"
	"slices"
	"testing"

	"golang.org/x/net/http/httpguts"
)

// The fast path's own parsers are checked against net/http's: a head the
// fast path accepts must be one net/http accepts too (ReadRequest with the
// checks its server adds; ReadResponse), read the same way: same method,
// target, Host, header values and, above all, the same framing of the body
// (a length, chunked, or up to the close) and the same decision to close.
// A head the fast path does not accept is left to net/http, so only
// acceptance by the fast path can diverge. Seeds are under
// testdata/fuzz; each divergence found is one of them.

// FuzzRequestHead compares request.parse with net/http's server.
func FuzzRequestHead(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a.localhost\r\n\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		n := headEnd(data)
		if n <= 0 {
			return // incomplete, or a bare LF: net/http's
		}
		head := data[:n]
		var r request
		if !r.parse(head) {
			return
		}
		req, err := stdRequest(head)
		if err != nil {
			t.Fatalf("the fast path accepts a head net/http refuses (%v):\n%q", err, head)
		}
		if got := fmt.Sprintf("%s %s host %q length %d close %v", r.method, r.uri, r.host, r.cl, r.close); got !=
			fmt.Sprintf("%s %s host %q length %d close %v", req.Method, req.RequestURI, req.Host, req.ContentLength, req.Close) {
			t.Fatalf("the fast path reads %s, net/http %s %s host %q length %d close %v:\n%q",
				got, req.Method, req.RequestURI, req.Host, req.ContentLength, req.Close, head)
		}
		if req.TransferEncoding != nil {
			t.Fatalf("the fast path reads a length, net/http %v:\n%q", req.TransferEncoding, head)
		}
		for _, l := range r.lines {
			name, val, _ := splitHeader(l.line)
			if !slices.Contains(req.Header.Values(string(name)), string(val)) {
				t.Fatalf("the fast path reads %s: %q, net/http %q:\n%q", name, val, req.Header.Values(string(name)), head)
			}
		}
	})
}

// stdRequest reads a request head as net/http's server does.
func stdRequest(head []byte) (*http.Request, error) {
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
	if err != nil {
		return nil, err
	}
	// ReadRequest drops the Host lines the server checks: read them again.
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(head)))
	tp.ReadLine()
	mh, err := tp.ReadMIMEHeader()
	if err != nil {
		return nil, err
	}
	hosts, ok := mh["Host"]
	if req.ProtoAtLeast(1, 1) && (!ok || len(hosts) == 0) && req.Method != "CONNECT" {
		return nil, fmt.Errorf("missing required Host header")
	}
	if len(hosts) == 1 && !httpguts.ValidHostHeader(hosts[0]) {
		return nil, fmt.Errorf("malformed Host header")
	}
	for k, vs := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return nil, fmt.Errorf("invalid header name %q", k)
		}
		for _, v := range vs {
			if !httpguts.ValidHeaderFieldValue(v) {
				return nil, fmt.Errorf("invalid header value %q", v)
			}
		}
	}
	return req, nil
}

// FuzzAnswerHead compares answer.parse, and the framing the fast path
// reads from it, with http.ReadResponse, for an answer to GET or HEAD.
func FuzzAnswerHead(f *testing.F) {
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n"), false)
	f.Fuzz(func(t *testing.T, data []byte, isHead bool) {
		n := headEnd(data)
		if n <= 0 {
			return // incomplete, or a bare LF: http.ReadResponse's
		}
		head := data[:n]
		var a answer
		if !a.parse(head) {
			return
		}
		method := "GET"
		if isHead {
			method = "HEAD"
		}
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(head)), &http.Request{Method: method})
		if err != nil {
			t.Fatalf("the fast path accepts an answer to %s http.ReadResponse refuses (%v):\n%q", method, err, head)
		}
		if a.code != resp.StatusCode || string(a.status) != resp.Status {
			t.Fatalf("the fast path reads status %q, net/http %q:\n%q", a.status, resp.Status, head)
		}
		if a.code < 200 {
			return // skipped by both
		}
		fast := fastFraming(&a, isHead)
		std := stdFraming(resp, isHead)
		if fast != std {
			t.Fatalf("answer to %s: the fast path reads %s, net/http %s:\n%q", method, fast, std, head)
		}
		// The fast path may close a connection net/http would keep (an
		// HTTP/1.0 keep-alive), never the other way round.
		if resp.Close && !a.close && fast != "none" && fast != "until the close" {
			t.Fatalf("answer to %s: net/http closes after it, the fast path keeps the connection:\n%q", method, head)
		}
	})
}

// fastFraming is how relay reads the body of a parsed answer.
func fastFraming(a *answer, isHead bool) string {
	switch {
	case isHead || a.code == http.StatusNoContent || a.code == http.StatusNotModified:
		return "none"
	case a.chunked:
		return "chunked"
	case a.cl > 0:
		return fmt.Sprintf("length %d", a.cl)
	case a.cl == 0:
		return "none"
	}
	return "until the close"
}

// stdFraming is how net/http reads the body of an answer.
func stdFraming(resp *http.Response, isHead bool) string {
	switch {
	case isHead || resp.Body == http.NoBody:
		return "none"
	case len(resp.TransferEncoding) > 0:
		return "chunked"
	case resp.ContentLength > 0:
		return fmt.Sprintf("length %d", resp.ContentLength)
	}
	return "until the close"
}
