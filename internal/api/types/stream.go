package types

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

// MaxFrame is the largest payload of one frame; longer writes are split.
const MaxFrame = 1 << 20

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
		if n > MaxFrame {
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
