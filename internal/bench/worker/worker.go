// Package worker is the benchmarks' workload, `shoal bench-worker MODE
// ARGS...`. It stays in the shoal binary (standard library only, a few
// hundred lines) so that the host and storage suites run the binary under
// test both on the host and, copied into a root file system, inside shoal
// containers; the harness itself (package bench and its suites) is built
// into shoal-bench only.
package worker

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Run is the workload side of the host and storage suites, run as
// `shoal bench-worker MODE ARGS...` both on the host and, from a copy of the
// same static binary, inside shoal containers, so that both sides run the
// same code and time themselves:
//
//	time CMD ARGS...       run CMD (stdout discarded), print its wall time
//	membw BLOCK TOTAL      copy a BLOCK-byte buffer until TOTAL bytes moved, print MB/s
//	files-write DIR N      write N files of 1 KiB into DIR, print the time
//	files-read DIR         read every file under DIR, print the time
//	serve ADDR             TCP server: "R" connections echo bytes, "S" connections sink
//
// Times are printed as Go durations, rates as plain numbers.
func Run(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("bench-worker: a mode is required")
	}
	mode, args := args[0], args[1:]
	switch mode {
	case "time":
		if len(args) == 0 {
			return fmt.Errorf("bench-worker time: a command is required")
		}
		cmd := exec.Command(args[0], args[1:]...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		t0 := time.Now()
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, OneLine(stderr.String()))
		}
		fmt.Fprintln(stdout, time.Since(t0))
	case "membw":
		if len(args) != 2 {
			return fmt.Errorf("bench-worker membw BLOCK TOTAL")
		}
		block, err1 := strconv.Atoi(args[0])
		total, err2 := strconv.ParseInt(args[1], 10, 64)
		if err1 != nil || err2 != nil || block <= 0 || total <= 0 {
			return fmt.Errorf("bench-worker membw: BLOCK and TOTAL must be positive integers")
		}
		fmt.Fprintf(stdout, "%.1f\n", memcopy(block, total))
	case "files-write":
		if len(args) != 2 {
			return fmt.Errorf("bench-worker files-write DIR N")
		}
		n, err := strconv.Atoi(args[1])
		if err != nil {
			return fmt.Errorf("bench-worker files-write: N: %w", err)
		}
		d, err := WriteFiles(args[0], n)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, d)
	case "files-read":
		if len(args) != 1 {
			return fmt.Errorf("bench-worker files-read DIR")
		}
		d, err := readFiles(args[0])
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, d)
	case "serve":
		if len(args) != 1 {
			return fmt.Errorf("bench-worker serve ADDR")
		}
		return serve(args[0])
	default:
		return fmt.Errorf("bench-worker: unknown mode %q", mode)
	}
	return nil
}

// memcopy copies between two buffers of block bytes until total bytes have
// moved, and returns MB/s (10^6 bytes).
func memcopy(block int, total int64) float64 {
	src, dst := make([]byte, block), make([]byte, block)
	for i := range src {
		src[i] = byte(i)
	}
	copy(dst, src) // touch both before timing
	n := total / int64(block)
	if n == 0 {
		n = 1
	}
	t0 := time.Now()
	for i := int64(0); i < n; i++ {
		copy(dst, src)
		src, dst = dst, src
	}
	return float64(n*int64(block)) / time.Since(t0).Seconds() / 1e6
}

// WriteFiles writes n files of 1 KiB into dir (made if missing), spread
// over subfolders of 1000, and syncs the file system.
func WriteFiles(dir string, n int) (time.Duration, error) {
	buf := make([]byte, 1024)
	for i := range buf {
		buf[i] = 'a' + byte(i%26)
	}
	t0 := time.Now()
	for i := 0; i < n; i++ {
		sub := filepath.Join(dir, strconv.Itoa(i/1000))
		if i%1000 == 0 {
			if err := os.MkdirAll(sub, 0o755); err != nil {
				return 0, err
			}
		}
		if err := os.WriteFile(filepath.Join(sub, strconv.Itoa(i)), buf, 0o644); err != nil {
			return 0, err
		}
	}
	f, err := os.Open(dir)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if err := syncfs(f); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

// readFiles reads every regular file under dir.
func readFiles(dir string) (time.Duration, error) {
	buf := make([]byte, 64<<10)
	t0 := time.Now()
	n := 0
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		for {
			if _, err := f.Read(buf); err == io.EOF {
				break
			} else if err != nil {
				return err
			}
		}
		n++
		return nil
	})
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, fmt.Errorf("files-read %s: no files", dir)
	}
	return time.Since(t0), nil
}

// serve accepts TCP connections on addr. The first byte of a connection
// picks its kind: 'R' echoes every byte back (request-response), 'S' reads
// to the end and answers with the byte count (throughput).
func serve(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		go func(c net.Conn) {
			defer c.Close()
			r := bufio.NewReader(c)
			kind, err := r.ReadByte()
			if err != nil {
				return
			}
			switch kind {
			case 'R':
				b := make([]byte, 1)
				for {
					if _, err := io.ReadFull(r, b); err != nil {
						return
					}
					if _, err := c.Write(b); err != nil {
						return
					}
				}
			case 'S':
				n, _ := io.Copy(io.Discard, r)
				binary.Write(c, binary.BigEndian, n)
			}
		}(c)
	}
}

// OneLine folds s onto one line that is safe in a Markdown table cell,
// at most 300 bytes.
func OneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	s = strings.ReplaceAll(s, "|", "\\|")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
