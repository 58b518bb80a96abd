package proxy

import (
	"bufio"
	"net"
	"testing"
)

// BenchmarkServeSerial is BenchmarkServe with one client sending one
// request at a time: the latency of a single request through the fast
// path, wake-ups included, rather than its throughput.
func BenchmarkServeSerial(b *testing.B) {
	p := benchProxy(b)
	addr := serveProxy(b, p)
	req := []byte("GET / HTTP/1.1\r\nHost: a.localhost\r\nUser-Agent: bench\r\n\r\n")
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		if err := skipAnswer(br); err != nil {
			b.Fatal(err)
		}
	}
}
