// Package httperr writes shoal's HTTP error answers: the JSON body
// {"error": "...", "field": "..."} every failed request carries, and the
// status code each errdefs category maps to. The API, the proxy and the
// proxy's control socket answer errors through it, so they agree on the wire.
package httperr

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/errdefs"
)

// Body is the JSON body of every failed request, the API's types.Error.
type Body = types.Error

// StatusClientClosed is the status recorded for a request whose client went
// away before the answer (nginx's 499).
const StatusClientClosed = 499

// WriteJSON writes v as indented JSON with the status code.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// Write writes err as a Body naming field, with the status code.
func Write(w http.ResponseWriter, code int, err error, field string) {
	WriteJSON(w, code, Body{Error: err.Error(), Field: field})
}

// Status maps err's errdefs category to an HTTP status code: a body over
// its limit 413, invalid 400,
// not found 404, conflict 409, unavailable 503, a cancelled context 499, and
// anything else 500.
func Status(err error) int {
	var tl *TooLarge
	switch {
	case errors.As(err, &tl):
		return http.StatusRequestEntityTooLarge
	case errdefs.IsInvalid(err):
		return http.StatusBadRequest
	case errdefs.IsNotFound(err):
		return http.StatusNotFound
	case errdefs.IsConflict(err):
		return http.StatusConflict
	case errors.Is(err, errdefs.ErrUnavailable):
		return http.StatusServiceUnavailable
	case errors.Is(err, context.Canceled):
		return StatusClientClosed
	}
	return http.StatusInternalServerError
}

// WriteErr writes err with the status its category maps to and the field
// its errdefs.FieldError names.
func WriteErr(w http.ResponseWriter, err error) {
	Write(w, Status(err), err, errdefs.Field(err))
}
