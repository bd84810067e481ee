// Package cron parses the cron expressions of recurring schedules with
// github.com/robfig/cron/v3, a widely used parser whose calendar arithmetic
// handles time zones, month lengths and leap years; it implements
// schedule.ParseFunc. On top of it, this package refuses what a schedule
// must not carry (seconds fields, a TZ= prefix: the zone is the schedule's
// own field; fractional "@every" periods) and makes the days when clocks go
// back run a fixed-hour time once.
package cron

import (
	"errors"
	"fmt"
	"math/bits"
	"strings"
	"time"

	robfig "github.com/robfig/cron/v3"

	"github.com/taskmaster/taskmaster/domain/schedule"
)

// parser accepts five fields (minute hour day-of-month month day-of-week),
// the descriptors (@yearly @monthly @weekly @daily @midnight @hourly) and
// "@every <duration>".
var parser = robfig.NewParser(robfig.Minute | robfig.Hour | robfig.Dom | robfig.Month | robfig.Dow | robfig.Descriptor)

var _ schedule.ParseFunc = Parse

// Parse parses expr for the time zone loc.
//
// Daylight saving time, in a zone that has it: a time that does not exist
// on the day clocks go forward (02:30 when 02:00 becomes 03:00) does not
// tick that day; a time that occurs twice on the day clocks go back ticks
// once, at its first occurrence, when the expression names its hours (an
// expression that runs every hour runs in both of the repeated hours, as
// real hours pass). "@every" periods count real time and ignore the zone.
func Parse(expr string, loc *time.Location) (schedule.Spec, error) {
	expr = strings.TrimSpace(expr)
	if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
		return nil, errors.New("must not name a time zone: use the timezone field")
	}
	if rest, ok := strings.CutPrefix(expr, "@every "); ok {
		d, err := time.ParseDuration(strings.TrimSpace(rest))
		if err != nil || d < time.Second || d%time.Second != 0 {
			return nil, errors.New(`"@every" takes a whole number of seconds, at least 1s (30s, 5m, 1h30m)`)
		}
		return period(d), nil
	}
	s, err := parser.Parse(expr)
	if err != nil {
		return nil, fmt.Errorf("must be five fields (minute hour day-of-month month day-of-week), a descriptor such as @daily, or @every <duration>: %v", err)
	}
	spec, ok := s.(*robfig.SpecSchedule)
	if !ok {
		return nil, fmt.Errorf("unsupported expression %q", expr)
	}
	c := *spec
	c.Location = loc
	return &calendar{spec: &c, fixedHours: bits.OnesCount64(c.Hour&(1<<24-1)) < 24}, nil
}

// period is an "@every" expression.
type period time.Duration

func (p period) Next(t time.Time) time.Time { return t.Add(time.Duration(p)) }
func (p period) Period() time.Duration      { return time.Duration(p) }

// calendar is a five-field expression (or a descriptor) in a zone.
type calendar struct {
	spec *robfig.SpecSchedule
	// fixedHours: the expression names some hours, not every one.
	fixedHours bool
}

func (c *calendar) Period() time.Duration { return 0 }

// Next is the spec's next tick after t, passing over the second occurrence
// of a repeated wall time when the expression names its hours.
func (c *calendar) Next(t time.Time) time.Time {
	n := c.spec.Next(t)
	for c.fixedHours && !n.IsZero() && repeated(n, c.spec.Location) {
		n = c.spec.Next(n)
	}
	return n
}

// repeated reports whether the wall time of t in loc already occurred
// earlier the same day, before clocks went back.
func repeated(t time.Time, loc *time.Location) bool {
	local := t.In(loc)
	_, offset := local.Zone()
	for _, back := range []time.Duration{30 * time.Minute, time.Hour, 2 * time.Hour} {
		before := t.Add(-back).In(loc)
		if _, o := before.Zone(); o-offset == int(back/time.Second) && sameWall(before, local) {
			return true
		}
	}
	return false
}

func sameWall(a, b time.Time) bool {
	ay, am, ad := a.Date()
	by, bm, bd := b.Date()
	return ay == by && am == bm && ad == bd && a.Hour() == b.Hour() && a.Minute() == b.Minute() && a.Second() == b.Second()
}
