package api

import (
	"bytes"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/api/types"
)

func TestFramesRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	fw := NewFrameWriter(&buf)
	big := bytes.Repeat([]byte("x"), types.MaxFrame+10)
	fw.Writer(types.FrameStdout).Write([]byte("out1 "))
	fw.Writer(types.FrameStderr).Write([]byte("err"))
	fw.Writer(types.FrameStdout).Write(big)
	if err := fw.WriteExit(types.Exit{ID: "c1", Code: 137, OOMKilled: true}); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	e, err := types.ReadFrames(&buf, &out, &errb)
	if err != nil {
		t.Fatal(err)
	}
	if e.ID != "c1" || e.Code != 137 || !e.OOMKilled {
		t.Fatalf("exit %+v", e)
	}
	if errb.String() != "err" || out.Len() != 5+len(big) || !strings.HasPrefix(out.String(), "out1 x") {
		t.Fatalf("stdout %d bytes, stderr %q", out.Len(), errb.String())
	}
}

func TestFramesTruncated(t *testing.T) {
	var buf bytes.Buffer
	NewFrameWriter(&buf).Writer(types.FrameStdout).Write([]byte("partial"))
	var out bytes.Buffer
	if _, err := types.ReadFrames(&buf, &out, &out); err == nil || !strings.Contains(err.Error(), "exit status") {
		t.Fatalf("stream without an exit frame: err %v", err)
	}
	if out.String() != "partial" {
		t.Fatalf("output before the cut was lost: %q", out.String())
	}
	bad := bytes.NewReader([]byte{9, 0, 0, 0, 1, 'x'})
	if _, err := types.ReadFrames(bad, &out, &out); err == nil || !strings.Contains(err.Error(), "unknown frame") {
		t.Fatalf("unknown frame type: err %v", err)
	}
}
