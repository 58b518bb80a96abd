package node

import (
	"io"
	"time"
)

// LogLine is a line of a replica's log.
type LogLine struct {
	Replica string
	Time    time.Time
	Text    string
}

// LogLines parses raw lines of replica id's log (see ParseLine); a line
// without a stamp takes the time of the line before it, the first from.
func LogLines(id string, raw []string, from time.Time) []LogLine {
	out := make([]LogLine, len(raw))
	t := from
	for i, r := range raw {
		lt, text := ParseLine(r)
		if !lt.IsZero() {
			t = lt
		}
		out[i] = LogLine{Replica: id, Time: t, Text: text}
	}
	return out
}

// SelectLogs merges the logs of replicas (each a replica's lines in the
// order written) by time, keeping only the lines at or after since (zero:
// all) and then the last tail of them (tail <= 0: all). Each replica's
// lines keep their order; lines of the same time keep the order of logs.
func SelectLogs(logs [][]LogLine, since time.Time, tail int) []LogLine {
	heads := make([][]LogLine, 0, len(logs))
	total := 0
	for _, l := range logs {
		if !since.IsZero() {
			i := len(l)
			for i > 0 && !l[i-1].Time.Before(since) {
				i--
			}
			l = l[i:]
		}
		if tail > 0 && len(l) > tail {
			l = l[len(l)-tail:] // the last tail merged come from these
		}
		if len(l) > 0 {
			heads = append(heads, l)
			total += len(l)
		}
	}
	out := make([]LogLine, 0, total)
	for len(heads) > 0 {
		k := 0
		for i := 1; i < len(heads); i++ {
			if heads[i][0].Time.Before(heads[k][0].Time) {
				k = i
			}
		}
		out = append(out, heads[k][0])
		if heads[k] = heads[k][1:]; len(heads[k]) == 0 {
			heads = append(heads[:k], heads[k+1:]...)
		}
	}
	if tail > 0 && len(out) > tail {
		out = out[len(out)-tail:]
	}
	return out
}

// WriteLogLine writes l as `shoal app logs` shows it: "ID | TEXT", or with
// stamps "ID | TIME TEXT" (TIME as in the log, RFC 3339 UTC).
func WriteLogLine(w io.Writer, l LogLine, stamps bool) error {
	b := make([]byte, 0, len(l.Replica)+len(l.Text)+StampLen+5)
	b = append(b, l.Replica...)
	b = append(b, " | "...)
	if stamps {
		if l.Time.IsZero() {
			b = append(b, "-"...)
		} else {
			b = l.Time.UTC().AppendFormat(b, StampLayout)
		}
		b = append(b, ' ')
	}
	b = append(b, l.Text...)
	b = append(b, '\n')
	_, err := w.Write(b)
	return err
}
