package image

import (
	"regexp"
	"strings"
	"sync"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// lazyRegexp compiles expr on first use, so that starting the shoal binary
// (every CLI command) does not pay for patterns only the daemon needs.
func lazyRegexp(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}

var (
	domainRE    = lazyRegexp(`^(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]{1,5})?$`)
	componentRE = lazyRegexp(`^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$`)
	tagRE       = lazyRegexp(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)
	hexRE       = lazyRegexp(`^[a-f0-9]+$`)
)

// DefaultTag is the tag a reference without one gets.
const DefaultTag = "latest"

// ParseReference validates an image reference "[domain[:port]/]path[:tag]"
// and returns its name and tag ("latest" when absent). Digest references
// ("name@sha256:...") are not names and are refused; Get accepts digests on
// their own. A malformed reference is an errdefs.Invalid("reference", ...).
func ParseReference(s string) (name, tag string, err error) {
	bad := func(why string) (string, string, error) {
		return "", "", errdefs.Invalid("reference", "%q: %s", s, why)
	}
	if s == "" {
		return bad("empty")
	}
	if strings.Contains(s, "@") {
		return bad("a digest reference is not a name")
	}
	name, tag = s, DefaultTag
	if i := strings.LastIndexByte(s, ':'); i > strings.LastIndexByte(s, '/') {
		name, tag = s[:i], s[i+1:]
		if !tagRE().MatchString(tag) {
			return bad("malformed tag " + quote(tag))
		}
	}
	if len(name) > 255 {
		return bad("name longer than 255 characters")
	}
	parts := strings.Split(name, "/")
	if len(parts) > 1 && (strings.ContainsAny(parts[0], ".:") || parts[0] == "localhost") {
		if !domainRE().MatchString(parts[0]) {
			return bad("malformed registry " + quote(parts[0]))
		}
		parts = parts[1:]
	}
	for _, p := range parts {
		if !componentRE().MatchString(p) {
			return bad("malformed name component " + quote(p) + " (lower-case letters, digits and . _ - only)")
		}
	}
	return name, tag, nil
}

// normalizeRef returns "name:tag" for a valid reference.
func normalizeRef(s string) (string, error) {
	name, tag, err := ParseReference(s)
	if err != nil {
		return "", err
	}
	return name + ":" + tag, nil
}

func quote(s string) string { return `"` + s + `"` }
