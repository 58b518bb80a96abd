package errdefs

import (
	"errors"
	"fmt"
	"testing"
)

func TestCategories(t *testing.T) {
	err := fmt.Errorf("image %q: %w", "x:1", Invalid("reference", "bad %s", "name"))
	if !IsInvalid(err) || IsNotFound(err) || IsConflict(err) {
		t.Fatalf("wrapped FieldError categories wrong: %v", err)
	}
	if Field(err) != "reference" {
		t.Fatalf("Field = %q, want reference", Field(err))
	}
	if err.Error() != `image "x:1": reference: bad name` {
		t.Fatalf("message %q", err.Error())
	}
	nf := fmt.Errorf("container %q: %w", "c", ErrNotFound)
	if !IsNotFound(nf) || Field(nf) != "" {
		t.Fatalf("not-found categories wrong: %v", nf)
	}
	if !IsConflict(fmt.Errorf("x: %w", ErrConflict)) || errors.Is(nf, ErrConflict) {
		t.Fatal("conflict category wrong")
	}
}
