package worker_test

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
	"github.com/taskmaster/taskmaster/domain/worker"
)

var registerFields = regexp.MustCompile(`^(id|queues|queues\[\d+\]|tags|tags\[\d+\])$`)

// FuzzValidateRegister: ValidateRegister never panics, refuses only with a
// validation error naming registration fields, and what it accepts has a
// valid id, valid distinct queue names and distinct tags, and registers.
func FuzzValidateRegister(f *testing.F) {
	f.Add("mailer-1", "emails,sms", "smtp")
	f.Add("", "", "")
	f.Add("host 1", "a/b,a b,é", "tab\there,")
	f.Add(strings.Repeat("w", 129), strings.Repeat("q,", 65), strings.Repeat("t,", 65))
	f.Add("w", "a,a,b", "x,x")
	f.Fuzz(func(t *testing.T, id, queues, tags string) {
		p := worker.RegisterParams{ID: id}
		if queues != "" {
			p.Queues = strings.Split(queues, ",")
		}
		if tags != "" {
			p.Tags = strings.Split(tags, ",")
		}
		err := worker.ValidateRegister(&p)
		if err != nil {
			var verr *validation.Error
			require.ErrorAs(t, err, &verr)
			require.NotEmpty(t, verr.Fields)
			for _, fe := range verr.Fields {
				require.Regexp(t, registerFields, fe.Field)
			}
			return
		}
		require.LessOrEqual(t, len(p.Queues), worker.MaxQueues)
		for i, q := range p.Queues {
			require.True(t, task.ValidQueue(q), "%q", q)
			require.NotContains(t, p.Queues[:i], q)
		}
		for i, tag := range p.Tags {
			require.NotContains(t, p.Tags[:i], tag)
		}
		w, _, err := worker.Register(p, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
		require.NoError(t, err)
		require.Equal(t, id, w.ID())
		require.Equal(t, worker.StatusActive, w.Status())
	})
}
