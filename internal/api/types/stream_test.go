package types

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
)

func frame(id byte, p []byte) []byte {
	b := []byte{id, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(len(p)))
	return append(b, p...)
}

func TestReadFrames(t *testing.T) {
	var in bytes.Buffer
	in.Write(frame(FrameStdout, []byte("out")))
	in.Write(frame(FrameStderr, []byte("err")))
	in.Write(frame(FrameExit, []byte(`{"id":"c1","code":2,"signal":"KILL"}`)))
	in.Write(frame(FrameStdout, []byte("after the exit")))
	var out, errb bytes.Buffer
	e, err := ReadFrames(&in, &out, &errb)
	if err != nil {
		t.Fatal(err)
	}
	if e != (Exit{ID: "c1", Code: 2, Signal: "KILL"}) || out.String() != "out" || errb.String() != "err" {
		t.Fatalf("exit %+v, stdout %q, stderr %q", e, out.String(), errb.String())
	}
	big := bytes.NewReader([]byte{FrameStdout, 0xff, 0xff, 0xff, 0xff})
	if _, err := ReadFrames(big, &out, &out); err == nil || !strings.Contains(err.Error(), "too large") {
		t.Fatalf("frame above MaxFrame: err %v", err)
	}
}
