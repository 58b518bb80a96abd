// Command hello is shoal's smallest example app: a static HTTP server that
// listens on $PORT (default 8080) and answers every request with a greeting
// naming the replica that served it. /healthz answers 200 once it listens.
package main

import (
	"fmt"
	"log"
	"net/http"
	"os"
	"sync/atomic"
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
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		n := served.Add(1)
		w.Header().Set("X-Replica", host)
		fmt.Fprintf(w, "%s from %s (request %d)\n", greeting, host, n)
	})
	log.Printf("hello: listening on :%s", port)
	log.Fatal(http.ListenAndServe(":"+port, mux))
}
