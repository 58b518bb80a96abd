package httperr

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/jsonlimit"
	"github.com/shoal-run/shoal/internal/units"
)

// TooLarge is a request body over its endpoint's limit: 413, field "body".
type TooLarge struct{ Limit int64 }

func (e *TooLarge) Error() string {
	return "body: the request body is above " + units.FormatBytes(e.Limit)
}

// Unwrap makes it an invalid input naming the body.
func (e *TooLarge) Unwrap() error {
	return errdefs.Invalid("body", "above %s", units.FormatBytes(e.Limit))
}

// ReadBody reads r's body, refusing one over limit bytes with a TooLarge
// (the connection is then closed after the answer, so a client that sends
// gigabytes is not read to the end).
func ReadBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return nil, &TooLarge{Limit: limit}
	case err != nil:
		return nil, errdefs.Invalid("body", "reading the request: %v", err)
	}
	return b, nil
}

// ReadJSON reads r's body, at most limit bytes, into v with DecodeJSON.
func ReadJSON(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	b, err := ReadBody(w, r, limit)
	if err != nil {
		return err
	}
	return DecodeJSON(b, v)
}

// DecodeJSON decodes one JSON value from b into v strictly: an unknown
// field, a value of the wrong type, or anything after the value is an
// invalid input naming the field at fault ("body" when no field is).
//
// The document is measured first (jsonlimit.Default: its depth and number
// of values), so that decoding costs in proportion to the body's size
// whatever its shape.
func DecodeJSON(b []byte, v any) error {
	if err := jsonlimit.Check(b, jsonlimit.Default); err != nil {
		return errdefs.Invalid("body", "%v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if _, terr := dec.Token(); terr != io.EOF {
			return errdefs.Invalid("body", "malformed request: data after the JSON value")
		}
		return nil
	}
	field := "body"
	var ute *json.UnmarshalTypeError
	if errors.As(err, &ute) && ute.Field != "" {
		field = ute.Field
	} else if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok && strings.Trim(name, `"`) != "" {
		field = strings.Trim(name, `"`)
	}
	if errors.Is(err, io.EOF) {
		return errdefs.Invalid(field, "malformed request: the body is empty")
	}
	return errdefs.Invalid(field, "malformed request: %v", err)
}
