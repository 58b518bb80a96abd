// Package units parses and prints the sizes shoal users type: memory limits
// such as "64Mi", "1G" or "512k", and plain byte counts.
package units

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

var suffixes = []struct {
	s string
	m float64
}{
	{"ki", 1 << 10}, {"mi", 1 << 20}, {"gi", 1 << 30}, {"ti", 1 << 40},
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"t", 1 << 40},
	{"kb", 1 << 10}, {"mb", 1 << 20}, {"gb", 1 << 30}, {"tb", 1 << 40},
	{"b", 1},
}

// ParseBytes parses a size: a number of bytes, optionally with a binary
// suffix (k, Ki, M, Mi, G, Gi, T, Ti, with or without a trailing B; all are
// powers of 1024). Fractions are allowed ("1.5G"). Negative sizes are errors.
func ParseBytes(s string) (int64, error) {
	t := strings.TrimSpace(strings.ToLower(s))
	if t == "" {
		return 0, fmt.Errorf("empty size")
	}
	mult := 1.0
	num := t
	best := ""
	for _, suf := range suffixes {
		if strings.HasSuffix(t, suf.s) && len(suf.s) > len(best) {
			best, mult = suf.s, suf.m
		}
	}
	num = strings.TrimSpace(strings.TrimSuffix(t, best))
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("size %q: not a number with an optional unit (e.g. 64Mi, 1G, 4096)", s)
	}
	if f < 0 {
		return 0, fmt.Errorf("size %q: must not be negative", s)
	}
	v := f * mult
	if v > math.MaxInt64/2 {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return int64(v), nil
}

// FormatBytes prints n with a binary unit, e.g. 67108864 → "64Mi".
func FormatBytes(n int64) string {
	units := []string{"", "Ki", "Mi", "Gi", "Ti"}
	f := float64(n)
	i := 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	if f == math.Trunc(f) {
		return fmt.Sprintf("%d%s", int64(f), units[i])
	}
	return fmt.Sprintf("%.1f%s", f, units[i])
}
