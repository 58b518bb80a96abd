package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/api"
	"github.com/shoal-run/shoal/internal/api/types"
)

// TestBodiesOfAnyShapeCheap: a body of many small values, or nested deep,
// is refused with 400 naming the body before it is decoded, at a cost in
// proportion to its size: a job batch of 8 MiB of "{}," decoded to 2.8
// million job requests (about 1.5 GB) before.
func TestBodiesOfAnyShapeCheap(t *testing.T) {
	s := &api.Server{Jobs: parsingJobs{}, Apps: parsingApps{}, Images: parsingImages{}, Containers: parsingContainers{},
		Health: func(context.Context) types.Health { return types.Health{Status: "ok"} }}
	h := s.Handler("")
	for _, rt := range fuzzRoutes {
		size := api.MaxBody - 16
		if rt.path == "/v1/jobs" {
			size = 8 << 20
		}
		for name, body := range map[string][]byte{
			"many values": []byte("[" + strings.Repeat("{},", size/3-1) + "{}]"),
			"deep":        []byte(strings.Repeat("[", size/2) + strings.Repeat("]", size/2)),
			"deep object": []byte(strings.Repeat(`{"a":`, size/6) + "1" + strings.Repeat("}", size/6)),
		} {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(rt.method, rt.path, bytes.NewReader(body)))
			runtime.ReadMemStats(&after)
			var e types.Error
			json.Unmarshal(w.Body.Bytes(), &e)
			if w.Code != http.StatusBadRequest || e.Field != "body" || !strings.Contains(e.Error, "the limit") {
				t.Errorf("%s %s, %s (%d bytes): %d %.200s, want 400 naming the body and the limit", rt.method, rt.path, name, len(body), w.Code, w.Body.Bytes())
			}
			// The body read whole (with the growth of its buffer), no more.
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4*uint64(len(body))+1<<20 {
				t.Errorf("%s %s, %s (%d bytes): %d bytes allocated", rt.method, rt.path, name, len(body), alloc)
			}
		}
	}
}
