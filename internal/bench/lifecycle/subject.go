package lifecycle

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/bench/kit"
)

// subject is one thing measured: a way to run /bin/true in a container.
type subject struct {
	key     string   // stable identifier, e.g. "runc-run"
	name    string   // shown in tables
	command string   // the exact command or call measured
	phases  []string // phases each run reports, in display order
	run     func(ctx context.Context, i int) (map[string]time.Duration, error)
}

// Result holds the samples of one subject.
type Result struct {
	Key     string
	Name    string
	Command string
	Phases  []string
	Samples map[string][]time.Duration
	// Err says why the subject has no (or too few) numbers; empty on success.
	Err string
}

// Summary returns the summary of one phase.
func (r *Result) Summary(phase string) bench.Summary {
	if r == nil {
		return bench.Summary{}
	}
	return bench.Summarize(r.Samples[phase])
}

// OK reports whether the subject ran every time without error.
func (r *Result) OK() bool { return r != nil && r.Err == "" && len(r.Samples[kit.PhaseTotal]) > 0 }

// measure runs warmup unrecorded runs of each subject, then runs recorded
// runs interleaved (subject A, B, C, A, B, C, ...) so that drift on the host
// touches every subject alike. A subject that fails stops being run; its
// error is kept in its Result.
// afterWarmup, if not nil, is called between the warm-up and the recorded
// runs.
func measure(ctx context.Context, suite string, subjects []subject, warmup, runs int, progress io.Writer, afterWarmup func()) ([]*Result, error) {
	results := make([]*Result, len(subjects))
	for i, s := range subjects {
		results[i] = &Result{Key: s.key, Name: s.name, Command: s.command, Phases: s.phases, Samples: map[string][]time.Duration{}}
	}
	seq := 0
	for i := 0; i < warmup; i++ {
		for j, s := range subjects {
			if results[j].Err != "" {
				continue
			}
			seq++
			fmt.Fprintf(progress, "%s: %s: warm-up %d/%d\n", suite, s.name, i+1, warmup)
			if _, err := s.run(ctx, seq); err != nil {
				if ctx.Err() != nil {
					return results, ctx.Err()
				}
				results[j].Err = err.Error()
			}
		}
	}
	if afterWarmup != nil {
		afterWarmup()
	}
	for i := 0; i < runs; i++ {
		for j, s := range subjects {
			if results[j].Err != "" {
				continue
			}
			seq++
			bench.Settle(ctx, bench.SettleIdle, bench.SettleWindow, bench.SettleMax)
			fmt.Fprintf(progress, "%s: %s: %d/%d\n", suite, s.name, i+1, runs)
			times, err := s.run(ctx, seq)
			if err != nil {
				if ctx.Err() != nil {
					return results, ctx.Err()
				}
				results[j].Err = fmt.Sprintf("run %d: %v", i+1, err)
				continue
			}
			for ph, d := range times {
				results[j].Samples[ph] = append(results[j].Samples[ph], d)
			}
		}
	}
	return results, nil
}
