// Command slowboot is an example app that needs a long time before it is
// ready, as a large framework app does: it waits $BOOT_DELAY (default 1.5s)
// before it listens on $PORT (default 8080), then answers like hello.
package main

import (
	"fmt"
	"log"
	"net/http"
	"os"
	"time"
)

func main() {
	start := time.Now()
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	delay := 1500 * time.Millisecond
	if s := os.Getenv("BOOT_DELAY"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			log.Fatalf("slowboot: BOOT_DELAY %q: %v", s, err)
		}
		delay = d
	}
	// Stand-in for loading code and warming caches.
	time.Sleep(delay)
	host, _ := os.Hostname()
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "slowboot from %s, up since %s\n", host, start.Format(time.RFC3339Nano))
	})
	log.Printf("slowboot: ready after %s, listening on :%s", time.Since(start).Round(time.Millisecond), port)
	log.Fatal(http.ListenAndServe(":"+port, mux))
}
