package httperr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/shoal-run/shoal/internal/errdefs"
)

func TestStatus(t *testing.T) {
	for _, c := range []struct {
		err  error
		want int
	}{
		{errdefs.Invalid("name", "empty"), http.StatusBadRequest},
		{fmt.Errorf("app %q: %w", "a", errdefs.ErrNotFound), http.StatusNotFound},
		{fmt.Errorf("app %q: %w", "a", errdefs.ErrConflict), http.StatusConflict},
		{fmt.Errorf("app %q: %w", "a", errdefs.ErrUnavailable), http.StatusServiceUnavailable},
		{fmt.Errorf("wait: %w", context.Canceled), StatusClientClosed},
		{errors.New("boom"), http.StatusInternalServerError},
	} {
		if got := Status(c.err); got != c.want {
			t.Errorf("Status(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}

func TestWrite(t *testing.T) {
	rec := httptest.NewRecorder()
	WriteErr(rec, fmt.Errorf("app %q: %w", "a", errdefs.Invalid("port", "must be 1-65535")))
	if rec.Code != http.StatusBadRequest || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("code %d, content type %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	want := "{\n  \"error\": \"app \\\"a\\\": port: must be 1-65535\",\n  \"field\": \"port\"\n}\n"
	if rec.Body.String() != want {
		t.Fatalf("body %q, want %q", rec.Body.String(), want)
	}
	rec = httptest.NewRecorder()
	Write(rec, http.StatusNotFound, errors.New("no such endpoint"), "")
	var b Body
	if err := json.Unmarshal(rec.Body.Bytes(), &b); err != nil || b.Error != "no such endpoint" || b.Field != "" {
		t.Fatalf("body %q: %+v %v", rec.Body.String(), b, err)
	}
	if rec.Body.String() != "{\n  \"error\": \"no such endpoint\"\n}\n" {
		t.Fatalf("an empty field is left out: %q", rec.Body.String())
	}
}
