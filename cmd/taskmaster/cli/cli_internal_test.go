package cli

import (
	"encoding/json"
	"flag"
	"io"
	"strings"
	"testing"

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

	head := &limitedBuffer{limit: 4}
	n, err := head.Write([]byte("abcdef"))
	require.NoError(t, err)
	require.Equal(t, 6, n, "the writer is told everything was taken, so the command does not get EPIPE")
	require.True(t, head.overflow)
	require.Equal(t, "abcd", head.String())
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
