package units

import "testing"

func TestParseBytes(t *testing.T) {
	good := map[string]int64{
		"4096": 4096, "64Mi": 64 << 20, "64M": 64 << 20, "1G": 1 << 30, "1Gi": 1 << 30,
		"512k": 512 << 10, "1.5G": 3 << 29, "10MB": 10 << 20, "7b": 7, " 2ki ": 2048, "0": 0,
	}
	for in, want := range good {
		got, err := ParseBytes(in)
		if err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "abc", "-1", "-5Mi", "1Q", "NaN", "Inf", "1e30G"} {
		if _, err := ParseBytes(in); err == nil {
			t.Errorf("ParseBytes(%q) succeeded, want an error", in)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 1023: "1023", 1024: "1Ki", 64 << 20: "64Mi", 3 << 29: "1.5Gi"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
