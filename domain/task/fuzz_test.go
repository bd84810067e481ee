package task_test

import (
	"encoding/json"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
)

// submitFields are the fields ValidateSubmit may name.
var submitFields = regexp.MustCompile(`^(queue|max_attempts|priority|tags|tags\[\d+\]|idempotency_key|run_at|deadline|payload)$`)

// FuzzValidateSubmit: ValidateSubmit never panics, refuses only with a
// validation error naming submission fields, and what it accepts is a valid
// submission (defaults filled, an explicit max_attempts kept) that it
// accepts again unchanged and that Submit turns into a PENDING task unless
// the deadline has passed.
func FuzzValidateSubmit(f *testing.F) {
	f.Add("emails", []byte(`{"to":"a@example.com"}`), int64(5), 3, true, "smtp,eu", "welcome-42", int64(0), int64(1893456000), false, true)
	f.Add("q", []byte(nil), int64(0), 0, false, "", "", int64(0), int64(0), false, false)
	f.Add("q", []byte(`{`), int64(1)<<31, 0, true, "a,a,", "k\x00", int64(1893459600), int64(1893456060), true, true)
	f.Add("a b", []byte(`1e1000000`), int64(-1)<<31, 101, true, strings.Repeat("t,", 17), strings.Repeat("k", 256), int64(-time.Hour), int64(0), true, true)
	f.Add(strings.Repeat("q", 128), []byte(`"\u0000"`), int64(0), 1, true, "é,\t", "", int64(0), int64(1), false, true)
	f.Add("q", []byte(nil), int64(0), 0, false, "", "", int64(253402300799), int64(253402300800), true, true) // around the year 10000
	f.Add("q", []byte(nil), int64(0), 0, false, "", "", int64(-62135596801), int64(-62135596800), true, true) // around the year 1
	f.Fuzz(func(t *testing.T, queue string, payload []byte, priority int64, maxAttempts int, hasMax bool,
		tags, key string, runAtUnix, deadlineUnix int64, hasRunAt, hasDeadline bool) {
		now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		p := task.SubmitParams{Queue: queue, Payload: payload, Priority: int(priority), IdempotencyKey: key}
		if tags != "" {
			p.Tags = strings.Split(tags, ",")
		}
		if hasMax {
			p.MaxAttempts = &maxAttempts
		}
		if hasRunAt {
			runAt := time.Unix(runAtUnix, runAtUnix%1e9)
			p.RunAt = &runAt
		}
		if hasDeadline {
			deadline := time.Unix(deadlineUnix, deadlineUnix%1e9)
			p.Deadline = &deadline
		}
		err := task.ValidateSubmit(&p)
		if err != nil {
			var verr *validation.Error
			require.ErrorAs(t, err, &verr)
			require.NotEmpty(t, verr.Fields)
			for _, fe := range verr.Fields {
				require.Regexp(t, submitFields, fe.Field)
				require.NotEmpty(t, fe.Message)
			}
			return
		}
		require.True(t, task.ValidQueue(p.Queue))
		require.NotNil(t, p.MaxAttempts)
		require.GreaterOrEqual(t, *p.MaxAttempts, 1)
		require.LessOrEqual(t, *p.MaxAttempts, task.MaxMaxAttempts)
		if hasMax {
			require.Equal(t, maxAttempts, *p.MaxAttempts, "an explicit value is kept, never replaced")
		} else {
			require.Equal(t, task.DefaultMaxAttempts, *p.MaxAttempts)
		}
		require.LessOrEqual(t, len(p.Tags), task.MaxTags)
		for i, tag := range p.Tags {
			require.NotContains(t, p.Tags[:i], tag, "tags are de-duplicated")
		}
		require.True(t, len(payload) == 0 || json.Valid(payload))
		_, err = json.Marshal(struct{ RunAt, Deadline *time.Time }{p.RunAt, p.Deadline})
		require.NoError(t, err, "every accepted time can be written in a response")
		again := p
		again.Tags = slices.Clone(p.Tags)
		require.NoError(t, task.ValidateSubmit(&again))
		require.Equal(t, p, again)

		p.ID = taskID
		tk, ev, err := task.Submit(p, now)
		if err != nil {
			var verr *validation.Error
			require.ErrorAs(t, err, &verr)
			require.Equal(t, []validation.FieldError{{Field: "deadline", Message: verr.Fields[0].Message}}, verr.Fields)
			return
		}
		require.Equal(t, task.StatusPending, tk.Status())
		require.Equal(t, p.Queue, ev.Queue)
		require.False(t, errors.Is(err, task.ErrLeaseLost))
	})
}
