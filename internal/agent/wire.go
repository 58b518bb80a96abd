package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/httperr"
)

// maxErrBody bounds the error body read from a peer.
const maxErrBody = 64 << 10

// wireError is an error a peer answered: its message, and the errdefs
// category its status code says, so that errors.Is sees the same kind on
// both sides of the wire.
type wireError struct {
	msg  string
	kind error // nil: none of errdefs' kinds
}

func (e *wireError) Error() string { return e.msg }

// Is matches the errdefs kind the peer's status code carried.
func (e *wireError) Is(target error) bool { return e.kind != nil && target == e.kind }

// readErr turns a failed answer of node into an error of the same errdefs
// kind as the peer's: 400 invalid (with its field), 404 not found, 409
// conflict, 503 unavailable, 499 a cancelled context.
func readErr(node string, resp *http.Response) error {
	var b httperr.Body
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrBody))
	if json.Unmarshal(raw, &b) != nil || b.Error == "" {
		b.Error = strings.TrimSpace(resp.Status + " " + string(raw))
	}
	msg := fmt.Sprintf("node %s: %s", node, b.Error)
	switch resp.StatusCode {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		if b.Field != "" {
			return errdefs.Invalid(b.Field, "node %s: %s", node, strings.TrimPrefix(b.Error, b.Field+": "))
		}
		return &wireError{msg, errdefs.ErrInvalid}
	case http.StatusNotFound:
		return &wireError{msg, errdefs.ErrNotFound}
	case http.StatusConflict:
		return &wireError{msg, errdefs.ErrConflict}
	case http.StatusServiceUnavailable:
		return &wireError{msg, errdefs.ErrUnavailable}
	case httperr.StatusClientClosed:
		return &wireError{msg, context.Canceled}
	case http.StatusMisdirectedRequest:
		return &wireError{msg + " (its address now reaches another node; asked again, it is looked up anew)", errdefs.ErrUnavailable}
	case http.StatusUnauthorized:
		return &wireError{msg + " (the nodes do not share one cluster secret: give them the same --cluster-token-file, or none)", nil}
	}
	return &wireError{msg, nil}
}
