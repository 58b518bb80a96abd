package route

import (
	"encoding/json"
	"testing"
	"time"
)

// The field names are read by daemons and proxies of other builds.
func TestWireFormat(t *testing.T) {
	rt := Route{App: "web", Endpoints: []Endpoint{{ID: "web-1", Addr: "10.0.0.2:8080", Revision: 2}},
		MaxBodyBytes: 1, QueueLimit: 2, QueueTimeout: time.Second, Unavailable: "gone",
		Weights: map[int]int{2: 100}, Sticky: true, Frozen: 1, Starting: 3}
	b, err := json.Marshal(rt)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"App":"web","Endpoints":[{"ID":"web-1","Addr":"10.0.0.2:8080","Revision":2}],"MaxBodyBytes":1,"QueueLimit":2,"QueueTimeout":1000000000,"Unavailable":"gone","Weights":{"2":100},"Sticky":true,"Frozen":1,"Starting":3}`
	if string(b) != want {
		t.Fatalf("route JSON\n got %s\nwant %s", b, want)
	}
	b, err = json.Marshal(Endpoint{ID: "g-1", Addr: "10.0.0.3:50051", Revision: 1, Protocol: ProtocolH2C})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"ID":"g-1","Addr":"10.0.0.3:50051","Revision":1,"Protocol":"h2c"}`; string(b) != want {
		t.Fatalf("endpoint JSON\n got %s\nwant %s", b, want)
	}
	at := time.Unix(5, 0).UTC()
	l := Load{InFlight: 3, Queued: 1, Requests: 9, LastRequest: at,
		Endpoints: map[string]EndpointLoad{"web-1": {InFlight: 2, Requests: 8, LastRequest: at}}}
	b, err = json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	want = `{"InFlight":3,"Queued":1,"Requests":9,"LastRequest":"1970-01-01T00:00:05Z","Endpoints":{"web-1":{"InFlight":2,"Requests":8,"LastRequest":"1970-01-01T00:00:05Z"}}}`
	if string(b) != want {
		t.Fatalf("load JSON\n got %s\nwant %s", b, want)
	}
}

func TestPortRange(t *testing.T) {
	r, err := ParsePortRange("10000-19999")
	if err != nil || r != (PortRange{10000, 19999}) || !r.Contains(13306) || r.Contains(7070) || r.Contains(20000) {
		t.Fatalf("10000-19999: %+v, %v", r, err)
	}
	if r, err := ParsePortRange("5432"); err != nil || r != (PortRange{5432, 5432}) {
		t.Fatalf("5432: %+v, %v", r, err)
	}
	for _, bad := range []string{"", "x-1", "0-10", "20-10", "1-70000"} {
		if _, err := ParsePortRange(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	var zero PortRange
	if zero.String() != "10000-65535" || zero.Contains(1023) || !zero.Contains(13306) {
		t.Fatalf("the zero range is %s", zero)
	}
}
