package api

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
)

// StreamContentType marks a framed output stream.
const StreamContentType = "application/vnd.shoal.stream"

// Stream ids of a frame. A frame is one id byte, a big-endian uint32 length
// and the payload. The stream ends with one FrameExit frame holding an Exit.
const (
	FrameStdout byte = 1
	FrameStderr byte = 2
	FrameExit   byte = 3
)

const maxFrame = 1 << 20

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
	for len(p) > 0 || id == FrameExit {
		n := len(p)
		if n > maxFrame {
			n = maxFrame
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
		if id == FrameExit {
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
func (fw *FrameWriter) WriteExit(e Exit) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	return fw.WriteFrame(FrameExit, b)
}

// ReadFrames copies stdout and stderr frames from r to the writers until the
// exit frame, which it returns. A stream that ends without one is an error.
func ReadFrames(r io.Reader, stdout, stderr io.Writer) (Exit, error) {
	var hdr [5]byte
	buf := make([]byte, 32<<10)
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return Exit{}, fmt.Errorf("output stream ended before the container's exit status")
			}
			return Exit{}, fmt.Errorf("read output stream: %w", err)
		}
		n := int(binary.BigEndian.Uint32(hdr[1:]))
		if n > maxFrame {
			return Exit{}, fmt.Errorf("output stream: frame of %d bytes is too large", n)
		}
		if n > len(buf) {
			buf = make([]byte, n)
		}
		if _, err := io.ReadFull(r, buf[:n]); err != nil {
			return Exit{}, fmt.Errorf("read output stream: %w", err)
		}
		switch hdr[0] {
		case FrameStdout:
			stdout.Write(buf[:n])
		case FrameStderr:
			stderr.Write(buf[:n])
		case FrameExit:
			var e Exit
			if err := json.Unmarshal(buf[:n], &e); err != nil {
				return Exit{}, fmt.Errorf("decode exit status: %w", err)
			}
			return e, nil
		default:
			return Exit{}, fmt.Errorf("output stream: unknown frame type %d", hdr[0])
		}
	}
}
