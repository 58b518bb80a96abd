package clock

import (
	"testing"
	"time"
)

func TestFakeTimersFireInOrder(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := NewFake(start)
	t1 := f.NewTimer(2 * time.Second)
	fired := make(chan string, 2)
	f.AfterFunc(time.Second, func() { fired <- "func" })
	if f.Timers() != 2 {
		t.Fatalf("Timers() = %d, want 2", f.Timers())
	}
	f.Advance(500 * time.Millisecond)
	select {
	case <-t1.C():
		t.Fatal("timer fired before its deadline")
	default:
	}
	f.Advance(time.Second)
	if got := <-fired; got != "func" {
		t.Fatalf("AfterFunc did not run: %q", got)
	}
	select {
	case <-t1.C():
		t.Fatal("2s timer fired after 1.5s")
	default:
	}
	f.Advance(time.Second)
	if at := <-t1.C(); !at.Equal(start.Add(2 * time.Second)) {
		t.Fatalf("timer fired with time %v, want its deadline", at)
	}
	if got := f.Since(start); got != 2500*time.Millisecond {
		t.Fatalf("Since = %v, want 2.5s", got)
	}
}

func TestFakeStopAndReset(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	tm := f.NewTimer(time.Second)
	if !tm.Stop() {
		t.Fatal("Stop of an active timer returned false")
	}
	if tm.Stop() {
		t.Fatal("second Stop returned true")
	}
	f.Advance(2 * time.Second)
	select {
	case <-tm.C():
		t.Fatal("stopped timer fired")
	default:
	}
	tm.Reset(time.Second)
	f.Advance(time.Second)
	select {
	case <-tm.C():
	default:
		t.Fatal("reset timer did not fire")
	}
	if f.Timers() != 0 {
		t.Fatalf("%d timers left", f.Timers())
	}
}
