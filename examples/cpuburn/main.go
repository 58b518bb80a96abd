// Command cpuburn is an example app whose requests are CPU-bound, for
// throttle-driven scaling: each request hashes for ?ms=N milliseconds of CPU
// time (default $BURN_MS, else 20) and reports how long it took in wall time.
package main

import (
	"crypto/sha256"
	"fmt"
	"log"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	def := 20
	if s := os.Getenv("BURN_MS"); s != "" {
		if v, err := strconv.Atoi(s); err == nil && v >= 0 {
			def = v
		}
	}
	host, _ := os.Hostname()
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		ms := def
		if s := r.URL.Query().Get("ms"); s != "" {
			v, err := strconv.Atoi(s)
			if err != nil || v < 0 || v > 10000 {
				http.Error(w, "ms must be an integer from 0 to 10000", http.StatusBadRequest)
				return
			}
			ms = v
		}
		start := time.Now()
		sum := burn(time.Duration(ms) * time.Millisecond)
		fmt.Fprintf(w, "cpuburn from %s: %dms of CPU in %s (%x)\n", host, ms, time.Since(start).Round(time.Microsecond), sum[:4])
	})
	log.Printf("cpuburn: listening on :%s", port)
	log.Fatal(http.ListenAndServe(":"+port, mux))
}

// burn hashes until this thread has used d of CPU time, so that a throttled
// replica takes longer in wall time but does the same work.
func burn(d time.Duration) [32]byte {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var sum [32]byte
	begin := threadCPU()
	for threadCPU()-begin < d {
		for i := 0; i < 200; i++ {
			sum = sha256.Sum256(sum[:])
		}
	}
	return sum
}

func threadCPU() time.Duration {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return time.Duration(ts.Nano())
}
