// Package errdefs holds the error categories every shoal package shares:
// not found, conflict and invalid input. Callers wrap them with the object they
// concern (fmt.Errorf("image %q: %w", ref, errdefs.ErrNotFound)) and ask with
// errors.Is; the API maps them to HTTP status codes.
package errdefs

import (
	"errors"
	"fmt"
)

// Sentinel categories. Wrap them; never compare error strings.
var (
	ErrNotFound    = errors.New("not found")
	ErrConflict    = errors.New("conflict")
	ErrInvalid     = errors.New("invalid")
	ErrUnavailable = errors.New("unavailable")
)

// FieldError is invalid input in one named field (a flag, a JSON field, a
// manifest key or a file). It matches ErrInvalid with errors.Is.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return fmt.Sprintf("%s: %s", e.Field, e.Msg) }

// Is reports that a FieldError is an ErrInvalid.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

// Invalid returns a FieldError for field with a formatted message.
func Invalid(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Field returns the field named by the first FieldError in err's chain, or "".
func Field(err error) string {
	var fe *FieldError
	if errors.As(err, &fe) {
		return fe.Field
	}
	return ""
}

// IsNotFound reports whether err is a not-found error.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// IsConflict reports whether err is a conflict error.
func IsConflict(err error) bool { return errors.Is(err, ErrConflict) }

// IsInvalid reports whether err is an invalid-input error.
func IsInvalid(err error) bool { return errors.Is(err, ErrInvalid) }
