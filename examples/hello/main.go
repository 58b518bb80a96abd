// Command hello is shoal's smallest example app: a static HTTP server that
// listens on $PORT (default 8080) and answers every request with a greeting
// naming the replica that served it. /healthz answers 200 once it listens.
// Three endpoints hold a connection open: /ws echoes WebSocket messages,
// /sse sends an event on every tick until the client leaves, and /upload
// reads a request body of any size and answers with its length.
// /sleep?ms=N answers after N milliseconds of wall time (up to 60000),
// using no CPU meanwhile: a request in flight for as long as a test needs,
// however busy the host is.
package main

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/net/websocket"
)

func main() {
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	host, _ := os.Hostname()
	greeting := os.Getenv("GREETING")
	if greeting == "" {
		greeting = "hello"
	}
	var served atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.Handle("/ws", websocket.Handler(func(ws *websocket.Conn) {
		var msg string
		for websocket.Message.Receive(ws, &msg) == nil {
			if websocket.Message.Send(ws, msg+" from "+host) != nil {
				return
			}
		}
	}))
	mux.HandleFunc("/sse", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("X-Replica", host)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for n := 1; ; n++ {
			if _, err := fmt.Fprintf(w, "data: %d from %s\n\n", n, host); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-t.C:
			}
		}
	})
	mux.HandleFunc("/upload", func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("X-Replica", host)
		fmt.Fprintf(w, "%d\n", n)
	})
	mux.HandleFunc("/sleep", func(w http.ResponseWriter, r *http.Request) {
		ms, err := strconv.Atoi(r.URL.Query().Get("ms"))
		if err != nil || ms < 0 || ms > 60000 {
			http.Error(w, "ms must be an integer from 0 to 60000", http.StatusBadRequest)
			return
		}
		select {
		case <-time.After(time.Duration(ms) * time.Millisecond):
		case <-r.Context().Done():
			return
		}
		w.Header().Set("X-Replica", host)
		fmt.Fprintf(w, "%s from %s after %dms\n", greeting, host, ms)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		n := served.Add(1)
		w.Header().Set("X-Replica", host)
		fmt.Fprintf(w, "%s from %s (request %d)\n", greeting, host, n)
	})
	log.Printf("hello: listening on :%s", port)
	log.Fatal(http.ListenAndServe(":"+port, mux))
}
