package dashboard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
)

// pageEvents is how many of the latest events a page shows.
const pageEvents = 200

// spans are the windows the charts offer: a minute, five and the whole
// history the sampler keeps (those shorter than it).
func (d *Dashboard) spans() []time.Duration {
	full := time.Duration(d.o.History) * d.o.Interval
	var out []time.Duration
	for _, s := range []time.Duration{time.Minute, 5 * time.Minute} {
		if s < full {
			out = append(out, s)
		}
	}
	return append(out, full)
}

// span is the chart window of ?span= (a Go duration, one of spans), by
// default five minutes or the whole history when that is shorter.
func (d *Dashboard) span(r *http.Request) (time.Duration, error) {
	spans := d.spans()
	q := r.URL.Query().Get("span")
	if q == "" {
		return min(5*time.Minute, spans[len(spans)-1]), nil
	}
	v, err := time.ParseDuration(q)
	if err != nil || !slices.Contains(spans, v) {
		return 0, fmt.Errorf("span %q: use one of %v", q, spans)
	}
	return v, nil
}

// page renders the whole page from the last sample and the latest events.
func (d *Dashboard) page(w http.ResponseWriter, r *http.Request) {
	span, err := d.span(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	snap, _ := d.s.snapshot()
	v := view(snap, span)
	for _, s := range d.spans() {
		v.Spans = append(v.Spans, spanChoice{Value: s.String(), Label: fmtSpan(s), Current: s == span})
	}
	if d.o.Events != nil {
		evs, err := d.o.Events.List(r.Context(), 0, "")
		if err != nil {
			v.Err = "events: " + err.Error()
		}
		if len(evs) > pageEvents {
			evs = evs[len(evs)-pageEvents:]
		}
		for _, e := range slices.Backward(evs) {
			v.Events = append(v.Events, eventOf(e))
		}
		if len(evs) > 0 {
			v.After = evs[len(evs)-1].Seq
		}
	}
	var b bytes.Buffer
	if err := templates.ExecuteTemplate(&b, "page", v); err != nil {
		d.o.Logger.Error("dashboard: render the page", "err", err)
		http.Error(w, "the page could not be rendered: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(b.Bytes())
}

// stream is the page's server-sent event stream: "sections" (a JSON object
// of element id → HTML, or "app:NAME" → that app's article, only what
// changed) after each sample, and
// "event" (the row of one logged event, with its seq as the event id)
// from the event after ?after= or Last-Event-ID on.
func (d *Dashboard) stream(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming is not supported here", http.StatusInternalServerError)
		return
	}
	span, err := d.span(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	after := int64(0)
	for _, s := range []string{r.URL.Query().Get("after"), r.Header.Get("Last-Event-ID")} {
		if s == "" {
			continue
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			http.Error(w, fmt.Sprintf("after %q is not an event number", s), http.StatusBadRequest)
			return
		}
		after = max(after, n)
	}
	ctx := r.Context()
	var events <-chan types.Event
	if d.o.Events != nil {
		var err error
		if events, err = d.o.Events.Watch(ctx, after, ""); err != nil {
			http.Error(w, "events: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	// A reconnecting page waits a second, not the browser's default three.
	fmt.Fprint(w, "retry: 1000\n\n")
	fl.Flush()
	sent := map[string]string{}
	for {
		snap, next := d.s.snapshot()
		r, err := d.render.get(snap, span)
		if err != nil {
			d.o.Logger.Error("dashboard: render", "err", err)
			return
		}
		if msg := changes(sent, r); len(msg) > 0 {
			if !writeSSE(w, "", "sections", msg) {
				return
			}
			fl.Flush()
		}
		for waiting := true; waiting; {
			select {
			case <-ctx.Done():
				return
			case <-d.done:
				return
			case <-next:
				waiting = false
			case e, ok := <-events:
				if !ok {
					return
				}
				row, err := renderEvent(e)
				if err != nil {
					d.o.Logger.Error("dashboard: render", "err", err)
					return
				}
				if !writeSSE(w, strconv.FormatInt(e.Seq, 10), "event", map[string]string{"html": row, "app": e.App}) {
					return
				}
				fl.Flush()
			}
		}
	}
}

// changes is what a page needs to show r, given what it was sent before:
// the sections that changed, and the apps section whole when the list of apps
// changed, else each app whose article changed ("app:NAME"). It records
// what it returns in sent.
func changes(sent map[string]string, r *rendered) map[string]string {
	msg := map[string]string{}
	for k, html := range r.sections {
		if sent[k] != html {
			msg[k], sent[k] = html, html
		}
	}
	names := strings.Join(r.names, "\n")
	if sent["names"] != names || sent["note"] != r.note {
		for k := range sent {
			if strings.HasPrefix(k, "app:") {
				delete(sent, k)
			}
		}
		for n, html := range r.apps {
			sent["app:"+n] = html
		}
		sent["names"], sent["note"] = names, r.note
		msg["apps"] = r.appsHTML()
		return msg
	}
	for n, html := range r.apps {
		if sent["app:"+n] != html {
			msg["app:"+n], sent["app:"+n] = html, html
		}
	}
	return msg
}

// writeSSE writes one server-sent event whose data is v as JSON (one
// line: JSON escapes newlines).
func writeSSE(w http.ResponseWriter, id, name string, v any) bool {
	b, err := json.Marshal(v)
	if err != nil {
		return false
	}
	var buf bytes.Buffer
	if id != "" {
		fmt.Fprintf(&buf, "id: %s\n", id)
	}
	fmt.Fprintf(&buf, "event: %s\ndata: %s\n\n", name, b)
	_, err = w.Write(buf.Bytes())
	return err == nil
}
