package bench

import (
	"context"
	"math"
	"time"

	"github.com/sluicemq/sluice/internal/clock"
)

// Clock is the run's time: Now is the time since the run started, on the
// monotonic clock, and SleepUntil waits until Now reaches t (at once when
// it has) or ctx ends. Tests drive the generator with a fake one.
type Clock interface {
	Now() time.Duration
	SleepUntil(ctx context.Context, t time.Duration) error
}

// realClock is the process's monotonic clock, from start.
type realClock struct{ start time.Time }

func (c realClock) Now() time.Duration { return time.Since(c.start) }

func (c realClock) SleepUntil(ctx context.Context, t time.Duration) error {
	d := t - c.Now()
	if d <= 0 {
		return ctx.Err()
	}
	return clock.Sleep(ctx, d)
}

// schedule is one producer's share of a step: records at fixed times
// start+phase, start+phase+interval, … before end (open loop), or, with
// a zero interval, one after another as fast as offer returns (saturated).
type schedule struct {
	start, end time.Duration
	phase      time.Duration
	interval   float64 // nanoseconds; 0: saturated
}

// at is the scheduled time of the schedule's k-th record.
func (s schedule) at(k int64) time.Duration {
	return s.start + s.phase + time.Duration(math.Round(float64(k)*s.interval))
}

// total is the number of records the schedule holds.
func (s schedule) total() int64 {
	span := float64(s.end - s.start - s.phase)
	if span <= 0 {
		return 0
	}
	n := int64(math.Ceil(span / s.interval))
	for n > 0 && s.at(n-1) >= s.end { // rounding
		n--
	}
	for s.at(n) < s.end {
		n++
	}
	return n
}

// generate offers the schedule's records: each one once its time has come,
// with that scheduled time, never later than needed and never earlier. An
// offer that blocks (the producer's buffer is full, the cluster stalls)
// delays the records after it, and since latency is measured from the
// scheduled time, their wait counts: the generator does not wait for the
// system it measures before scheduling more (no coordinated omission).
// Records whose time has come but that are still waiting when the step ends
// are not offered; generate returns how many (unsent). When ctx ends it
// stops at once, and records not offered then are not counted. Saturated,
// each record's time is when it is offered, and the step ends at end.
func generate(ctx context.Context, clk Clock, s schedule, offer func(ctx context.Context, at time.Duration)) (sent, unsent int64) {
	if s.interval == 0 {
		for {
			now := clk.Now()
			if now >= s.end || ctx.Err() != nil {
				return sent, 0
			}
			offer(ctx, now)
			sent++
		}
	}
	total := s.total()
	for k := int64(0); k < total; k++ {
		// Behind when the last offer returned after the step's end; a
		// wake-up a little late for a record due just before the end (timer
		// slack) still sends it.
		if clk.Now() >= s.end {
			return sent, total - k
		}
		if err := clk.SleepUntil(ctx, s.at(k)); err != nil {
			return sent, 0 // interrupted
		}
		offer(ctx, s.at(k))
		sent++
	}
	return sent, 0
}
