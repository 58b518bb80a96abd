package proxy

import (
	"bufio"
	"crypto/tls"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/certs/certstest"
	"github.com/shoal-run/shoal/internal/route"
)

// BenchmarkServeH2C sends GETs through the proxy's plain listener as
// streams of one cleartext HTTP/2 connection (prior knowledge), many at a
// time, as h2load does in the serving suite, to an HTTP/1.1 backend.
func BenchmarkServeH2C(b *testing.B) {
	p := benchProxy(b)
	addr := serveProxy(b, p)
	var proto http.Protocols
	proto.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &proto, DisableCompression: true, MaxConnsPerHost: 1}
	b.Cleanup(tr.CloseIdleConnections)
	b.SetParallelism(50) // 100 streams at once on 2 CPUs
	benchGet(b, &http.Client{Transport: tr}, "http://"+addr+"/", "a.localhost")
}

// benchTLS starts the proxy's TLS listener with an ECDSA P-256
// certificate for edge.test routed to a backend, and returns its address.
func benchTLS(b *testing.B) string {
	p := benchProxy(b, "edge.test")
	cp, kp := certstest.NewCA(b, "Bench CA").Issue(b, []string{"edge.test"}, time.Time{}, time.Time{})
	if err := p.SetCerts([]route.Cert{{Domains: []string{"edge.test"}, CertPEM: cp, KeyPEM: kp}}); err != nil {
		b.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.ServeTLS(l) }()
	b.Cleanup(func() {
		p.Close()
		<-done
	})
	return l.Addr().String()
}

// BenchmarkServeTLS sends GETs over kept-alive HTTP/1.1 connections over
// TLS, as wrk does in the serving suite.
func BenchmarkServeTLS(b *testing.B) {
	addr := benchTLS(b)
	benchKeptAlive(b, func() (net.Conn, error) {
		return tls.Dial("tcp", addr, &tls.Config{ServerName: "edge.test", InsecureSkipVerify: true})
	}, "edge.test")
}

// BenchmarkHandshakeTLS opens a new TLS connection (a full TLS 1.3
// handshake, no session to resume) for each GET, which the proxy answers
// and closes.
func BenchmarkHandshakeTLS(b *testing.B) {
	addr := benchTLS(b)
	req := []byte("GET / HTTP/1.1\r\nHost: edge.test\r\nConnection: close\r\n\r\n")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c, err := tls.Dial("tcp", addr, &tls.Config{ServerName: "edge.test", InsecureSkipVerify: true})
			if err != nil {
				b.Error(err)
				return
			}
			if _, err := c.Write(req); err == nil {
				err = skipAnswer(bufio.NewReader(c))
			}
			c.Close()
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
}
