package api

import (
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"sync"

	"github.com/shoal-run/shoal/internal/api/types"
)

// FrameWriter writes frames to an HTTP response and flushes each one, so the
// client sees output as soon as the container writes it. It is safe for
// concurrent use by the stdout and stderr copiers.
type FrameWriter struct {
	mu sync.Mutex
	w  io.Writer
	f  http.Flusher
}

// NewFrameWriter returns a FrameWriter on w; w is flushed after each frame if
// it is an http.Flusher.
func NewFrameWriter(w io.Writer) *FrameWriter {
	f, _ := w.(http.Flusher)
	return &FrameWriter{w: w, f: f}
}

// WriteFrame writes one frame.
func (fw *FrameWriter) WriteFrame(id byte, p []byte) error {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	for len(p) > 0 || id == types.FrameExit {
		n := len(p)
		if n > types.MaxFrame {
			n = types.MaxFrame
		}
		var hdr [5]byte
		hdr[0] = id
		binary.BigEndian.PutUint32(hdr[1:], uint32(n))
		if _, err := fw.w.Write(hdr[:]); err != nil {
			return err
		}
		if _, err := fw.w.Write(p[:n]); err != nil {
			return err
		}
		p = p[n:]
		if id == types.FrameExit {
			break
		}
	}
	if fw.f != nil {
		fw.f.Flush()
	}
	return nil
}

// Writer returns an io.Writer that sends everything written to it as frames
// of the given stream.
func (fw *FrameWriter) Writer(id byte) io.Writer { return frameStream{fw, id} }

type frameStream struct {
	fw *FrameWriter
	id byte
}

func (s frameStream) Write(p []byte) (int, error) {
	if err := s.fw.WriteFrame(s.id, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// WriteExit sends the closing frame.
func (fw *FrameWriter) WriteExit(e types.Exit) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	return fw.WriteFrame(types.FrameExit, b)
}
