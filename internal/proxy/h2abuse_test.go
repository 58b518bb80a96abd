package proxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// rawH2 is a client connection to the proxy driven frame by frame.
type rawH2 struct {
	c  net.Conn
	fr *http2.Framer
	// refused is closed when the proxy ends the connection: a GOAWAY
	// read, or the connection closed or reset.
	refused chan struct{}
	goAway  chan http2.ErrCode
}

// dialRawH2 opens an h2c connection with prior knowledge to addr and reads
// its frames in the background.
func dialRawH2(t *testing.T, addr string) *rawH2 {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	r := &rawH2{c: c, refused: make(chan struct{}), goAway: make(chan http2.ErrCode, 1)}
	r.fr = http2.NewFramer(c, c)
	if err := r.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	rd := http2.NewFramer(io.Discard, c)
	go func() {
		defer close(r.refused)
		for {
			f, err := rd.ReadFrame()
			if err != nil {
				return
			}
			if ga, ok := f.(*http2.GoAwayFrame); ok {
				r.goAway <- ga.ErrCode
				return
			}
		}
	}()
	return r
}

// headerBlock is an HPACK block of a GET for host, with extra fields.
func headerBlock(host string, extra ...hpack.HeaderField) []byte {
	var b bytes.Buffer
	e := hpack.NewEncoder(&b)
	for _, f := range append([]hpack.HeaderField{
		{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "http"},
		{Name: ":authority", Value: host}, {Name: ":path", Value: "/"}}, extra...) {
		e.WriteField(f)
	}
	return b.Bytes()
}

// wasRefused waits until the proxy ended r's connection and says how.
func (r *rawH2) wasRefused(t *testing.T, what string) string {
	t.Helper()
	select {
	case <-r.refused:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: the proxy kept the connection open", what)
	}
	select {
	case code := <-r.goAway:
		return "GOAWAY " + code.String()
	default:
		return "closed"
	}
}

// stillServes checks that the proxy answers on other connections, over
// HTTP/1.1 and HTTP/2.
func stillServes(t *testing.T, f *front, host, want string) {
	t.Helper()
	if code, body, _ := f.get(t, host, "/"); code != 200 || body != want {
		t.Fatalf("HTTP/1.1 after the attack: %d %q", code, body)
	}
	resp, err := h2cClient(t).Do(f.req(t, "GET", host, "/", nil))
	if err != nil {
		t.Fatalf("HTTP/2 after the attack: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != want || resp.ProtoMajor != 2 {
		t.Fatalf("HTTP/2 after the attack: %s %d %q", resp.Proto, resp.StatusCode, body)
	}
}

// A client that opens streams and resets them at once (rapid reset,
// CVE-2023-44487) has its connection closed, while the proxy goes on
// serving everyone else, and no more requests reach the replica than the
// budget of resets allows. The proxy's clock is a fake that stands still,
// so the budget never refills however long the storm takes on a loaded
// host, and the bound on the replica's hits is exact: the burst, the
// streams net/http2 queues before their handlers start (4 per allowed
// stream), and the streams open at once.
func TestH2RapidResetStormRefused(t *testing.T) {
	f := newFront(t, Options{Clock: clock.NewFake(time.Unix(1000, 0))})
	slow := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		select { // an answer that takes long: each stream holds a handler
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	})
	f.p.SetRoute(routeTo("slow", slow))
	f.p.SetRoute(routeTo("ok", namedBackend(t, "ok")))

	r := dialRawH2(t, f.addr)
	block := headerBlock("slow.localhost")
	var werr error
	sent := 0
	// More streams than the socket buffers between client and proxy hold
	// (some 50 bytes each: tens of MB), so that the storm cannot be all
	// written before the proxy reads it, however slow the proxy runs.
	const storm = 1 << 20
	for id := uint32(1); id < 2*storm && werr == nil; id += 2 {
		werr = r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndStream: true, EndHeaders: true})
		if werr == nil {
			werr = r.fr.WriteRSTStream(id, http2.ErrCodeCancel)
		}
		sent++
		select {
		case <-r.refused:
			werr = errors.New("refused")
		default:
		}
	}
	how := r.wasRefused(t, "rapid reset")
	t.Logf("rapid reset: %d streams sent, connection %s", sent, how)
	if sent >= storm {
		t.Fatalf("all %d streams were taken", sent)
	}
	stillServes(t, f, "ok.localhost", "ok")
	if n := slow.hits.Load(); n > h2ResetBurst+4*h2MaxStreams+h2MaxStreams {
		t.Fatalf("%d requests reached the replica", n)
	}
}

// A client that sends one request's headers in CONTINUATION frames with
// no end (CVE-2023-45288) has its connection closed once its header list
// is past the limit, long before the flood ends.
func TestH2ContinuationFloodRefused(t *testing.T) {
	f := newFront(t, Options{})
	f.p.SetRoute(routeTo("ok", namedBackend(t, "ok")))

	r := dialRawH2(t, f.addr)
	if err := r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: headerBlock("ok.localhost"), EndHeaders: false}); err != nil {
		t.Fatal(err)
	}
	// Each fragment a field of its own, never indexed, under the frame
	// size every HTTP/2 peer takes.
	var fb bytes.Buffer
	e := hpack.NewEncoder(&fb)
	e.WriteField(hpack.HeaderField{Name: "x-flood", Value: strings.Repeat("a", 8000), Sensitive: true})
	frag := fb.Bytes()
	const flood = 64 << 20
	sent := 0
	for sent < flood {
		if err := r.fr.WriteContinuation(1, false, frag); err != nil {
			break
		}
		sent += len(frag)
		select {
		case <-r.refused:
			sent = flood + 1
		default:
		}
	}
	how := r.wasRefused(t, "CONTINUATION flood")
	t.Logf("CONTINUATION flood: connection %s", how)
	if sent == flood {
		t.Fatalf("the whole flood of %d bytes was read", flood)
	}
	stillServes(t, f, "ok.localhost", "ok")
}

// Streams and frames are bounded by what the proxy announces in its
// SETTINGS.
func TestH2SettingsBoundStreams(t *testing.T) {
	f := newFront(t, Options{})
	c, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, http2.ClientPreface)
	fr := http2.NewFramer(c, c)
	fr.WriteSettings()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	fm, err := fr.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	sf, ok := fm.(*http2.SettingsFrame)
	if !ok {
		t.Fatalf("first frame %v, want SETTINGS", fm)
	}
	want := map[http2.SettingID]uint32{
		http2.SettingMaxConcurrentStreams: h2MaxStreams,
		http2.SettingMaxFrameSize:         h2MaxFrame,
	}
	for id, v := range want {
		if got, ok := sf.Value(id); !ok || got != v {
			t.Errorf("%v = %d (%v), want %d", id, got, ok, v)
		}
	}
	if got, ok := sf.Value(http2.SettingMaxHeaderListSize); !ok || got > 2*DefaultMaxHeadBytes {
		t.Errorf("MAX_HEADER_LIST_SIZE = %d (%v), want about %d", got, ok, DefaultMaxHeadBytes)
	}
}
