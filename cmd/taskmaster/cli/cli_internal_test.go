package cli

import (
	"encoding/base64"
	"encoding/json"
	"flag"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/require"
)

func TestParseInterspersed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args     []string
		wantJSON bool
		wantPos  []string
	}{
		{[]string{"ID"}, false, []string{"ID"}},
		{[]string{"ID", "--json"}, true, []string{"ID"}},
		{[]string{"--json", "ID"}, true, []string{"ID"}},
		{[]string{"a", "--json", "b"}, true, []string{"a", "b"}},
		{[]string{"--", "--json"}, false, []string{"--json"}},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		j := fs.Bool("json", false, "")
		pos, err := parseInterspersed(fs, tc.args)
		require.NoError(t, err, tc.args)
		require.Equal(t, tc.wantJSON, *j, tc.args)
		require.Equal(t, tc.wantPos, pos, tc.args)
	}
}

func TestResultFromOutput(t *testing.T) {
	t.Parallel()
	require.Nil(t, result([]byte("  \n")))
	require.Equal(t, json.RawMessage(`{"a":1}`), result([]byte("{\"a\":1}\n")))
	require.Equal(t, json.RawMessage(`42`), result([]byte("42\n")))
	require.Equal(t, "hello world", result([]byte("hello world\n")))
	require.Equal(t, "line 1\nline 2", result([]byte("line 1\nline 2\n")))
}

func TestOutputBuffers(t *testing.T) {
	t.Parallel()
	tail := &tailBuffer{limit: 5}
	_, _ = tail.Write([]byte("abc"))
	_, _ = tail.Write([]byte("defgh"))
	require.Equal(t, ": ...defgh", tail.suffix())
	require.Empty(t, (&tailBuffer{limit: 5}).suffix())

	head := &cappedBuffer{limit: 4}
	head.readFrom(iotest.OneByteReader(strings.NewReader("abcdef")))
	require.True(t, head.overflow)
	require.Equal(t, "abcd", string(head.bytes()))
	exact := &cappedBuffer{limit: 6}
	exact.readFrom(strings.NewReader("abcdef"))
	require.False(t, exact.overflow)
	require.Equal(t, "abcdef", string(exact.bytes()))
}

// Output that is not storable as it is becomes a result all the same: JSON
// PostgreSQL cannot hold is kept as text, and what is not UTF-8 text (NUL,
// invalid UTF-8) is kept base64-encoded.
func TestResultOfAnyOutput(t *testing.T) {
	t.Parallel()
	require.Nil(t, result([]byte(" \n")))
	require.Equal(t, `{"s":"\u0000"}`, result([]byte(`{"s":"\u0000"}`)), "JSON jsonb cannot hold: text")
	require.Equal(t, "1e1000000", result([]byte("1e1000000\n")), "a number beyond numeric: text")
	require.Equal(t, "café", result([]byte("café\n")))
	for _, out := range []string{"a\x00b", "\xff\xfe", "caf\xe9\n"} {
		require.Equal(t, encodedOutput{StdoutBase64: base64.StdEncoding.EncodeToString([]byte(out))}, result([]byte(out)), "%q", out)
	}
	raw, err := json.Marshal(result([]byte("\x00")))
	require.NoError(t, err)
	require.JSONEq(t, `{"stdout_base64":"AA=="}`, string(raw), "the documented marker")
}

// The commands get the worker's environment but its credentials, unless
// passed, and never the worker's own values of the task's variables.
func TestCommandEnvWithholdsCredentials(t *testing.T) {
	t.Parallel()
	environ := []string{"PATH=/bin", "TASKMASTER_API_KEY=tmk_x", "TASKMASTER_DATABASE_URL=postgres://x", "TASKMASTER_URL=http://h", "TASKMASTER_TASK_ID=stale", "HOME=/root"}
	require.Equal(t, []string{"PATH=/bin", "TASKMASTER_URL=http://h", "HOME=/root"}, commandEnv(environ, nil))
	require.Equal(t, []string{"PATH=/bin", "TASKMASTER_API_KEY=tmk_x", "TASKMASTER_URL=http://h", "HOME=/root"}, commandEnv(environ, []string{"TASKMASTER_API_KEY"}))
}

func TestUsageListsEveryCommand(t *testing.T) {
	t.Parallel()
	for _, c := range commands() {
		require.True(t, Handles(c.name))
		require.Contains(t, Usage(), "taskmaster "+c.name)
	}
	require.False(t, Handles("serve"))
	require.True(t, strings.HasSuffix(Usage(), "\n"))
}
