package tests

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/tests/testserver"
)

// The server writes the hot responses (tasks, claims, batch submits and
// reports) by hand; these tests pin the bytes the API has always sent.
// Payloads and results are the stored JSON, compacted and not escaped (<, >,
// &, U+2028 stay as they are); string members escape U+2028 and U+2029 but
// not <, > and &.

// rawMember is the exact bytes of the member key of the JSON object raw.
func rawMember(t *testing.T, raw []byte, key string) []byte {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(raw, &m), "%s", raw)
	v, ok := m[key]
	require.True(t, ok, "no %q in %s", key, raw)
	return v
}

// storedJSON is PostgreSQL's rendering of the task's column, compacted.
func storedJSON(t *testing.T, s *testserver.Server, id, column string) []byte {
	t.Helper()
	var text string
	require.NoError(t, s.DB.QueryRowContext(t.Context(), `SELECT `+column+`::text FROM tasks WHERE id = $1`, id).Scan(&text))
	var out bytes.Buffer
	require.NoError(t, json.Compact(&out, []byte(text)))
	return out.Bytes()
}

func TestAPIResponsesCarryTheStoredJSONBytes(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	payload := "{ \"html\": \"<a href=\\\"x\\\">&amp;</a>\", \"ls\": \"a\\u2028b\u2029c\", \"emoji\": \"\U0001F600 \u00e9\",\n" +
		"\t\"n\": [1, 2.50, -0, 1e3, {\"k\": \"v v\", \"e\": \"\\\\\\\" \\n\\t\\u0001\"}], \"dup\": 1, \"dup\": 2, \"empty\": {}, \"t\": true }"
	body := `{"queue": "bytes", "payload": ` + payload + `, "tags": ["<t>", "a&b", "x` + "\u2028" + `y"]}`
	r := c.Do(http.MethodPost, "/tasks/v1", body).Expect(t, http.StatusCreated, nil)
	id := string(bytes.Trim(rawMember(t, r.Body, "id"), `"`))
	want := storedJSON(t, s, id, "payload")
	require.Contains(t, string(want), `<a href=\"x\">&amp;</a>`)
	require.Contains(t, string(want), "a\u2028b\u2029c", "jsonb keeps U+2028 as the character")
	require.Equal(t, string(want), string(rawMember(t, r.Body, "payload")), "submit")
	require.Contains(t, string(r.Body), `"tags":["<t>","a&b","x\u2028y"]`, "strings escape U+2028 but not <, >, &")
	require.True(t, bytes.HasSuffix(r.Body, []byte("}\n")), "one JSON value and a newline")

	get := c.Do(http.MethodGet, "/tasks/v1/"+id, nil).Expect(t, http.StatusOK, nil)
	require.Equal(t, string(want), string(rawMember(t, get.Body, "payload")), "get")

	c.Register(jsonObj{"id": "w-bytes", "queues": []string{"bytes"}, "tags": []string{"<t>", "a&b", "x\u2028y"}})
	cl := c.Do(http.MethodPost, "/tasks/v1/claim", jsonObj{"worker_id": "w-bytes"}).Expect(t, http.StatusOK, nil)
	var claim struct{ Tasks []json.RawMessage }
	require.NoError(t, json.Unmarshal(cl.Body, &claim))
	require.Len(t, claim.Tasks, 1)
	require.Equal(t, string(want), string(rawMember(t, claim.Tasks[0], "payload")), "claim")
	lease := string(bytes.Trim(rawMember(t, claim.Tasks[0], "lease_id"), `"`))

	failed := c.Do(http.MethodPost, "/tasks/v1/"+id+"/fail", jsonObj{
		"worker_id": "w-bytes", "lease_id": lease, "error": "bad <input> & \u2028 \"q\" \x01 \xff",
	}).Expect(t, http.StatusOK, nil)
	require.Equal(t, "\"bad <input> & \\u2028 \\\"q\\\" \\u0001 \ufffd\"", string(rawMember(t, failed.Body, "last_error")))

	// The failed task waits for its retry: complete a second one.
	r = c.Do(http.MethodPost, "/tasks/v1", `{"queue": "bytes", "payload": `+payload+`}`).Expect(t, http.StatusCreated, nil)
	id = string(bytes.Trim(rawMember(t, r.Body, "id"), `"`))
	cl = c.Do(http.MethodPost, "/tasks/v1/claim", jsonObj{"worker_id": "w-bytes"}).Expect(t, http.StatusOK, nil)
	require.NoError(t, json.Unmarshal(cl.Body, &claim))
	require.Len(t, claim.Tasks, 1)
	require.Equal(t, `"`+id+`"`, string(rawMember(t, claim.Tasks[0], "id")))
	lease = string(bytes.Trim(rawMember(t, claim.Tasks[0], "lease_id"), `"`))
	result := `{"out": "<b>&</b>` + "\u2028" + `", "list": [ 1 , 2 ]}`
	done := c.Do(http.MethodPost, "/tasks/v1/complete", `{"worker_id": "w-bytes", "items": [{"id": "`+id+`", "lease_id": "`+lease+`", "result": `+result+`}]}`).
		Expect(t, http.StatusOK, nil)
	var report struct{ Items []json.RawMessage }
	require.NoError(t, json.Unmarshal(done.Body, &report))
	require.Len(t, report.Items, 1)
	task := rawMember(t, report.Items[0], "task")
	require.Equal(t, string(storedJSON(t, s, id, "result")), string(rawMember(t, task, "result")), "batch report")
	require.Equal(t, `{"out":"<b>&</b>`+"\u2028"+`","list":[1,2]}`, string(rawMember(t, task, "result")))
	require.Equal(t, string(want), string(rawMember(t, task, "payload")), "batch report")
}

func TestAPILargeAndUnicodePayloadsRoundTrip(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	var b strings.Builder
	b.WriteString(`{"items": [`)
	for i := range 20000 {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(`{"i": 12345, "s": "ünïcødé ✓ \u2028 <&> \"quoted\" \\ back"}`)
	}
	b.WriteString(`]}`)
	payload := b.String()
	require.Greater(t, len(payload), 1<<20)

	batch := c.Do(http.MethodPost, "/tasks/v1/batch", `{"tasks": [{"queue": "big", "payload": `+payload+`}, {"queue": "big", "payload": "\u00e9\u2028"}]}`).
		Expect(t, http.StatusCreated, nil)
	var sub struct {
		Tasks   []json.RawMessage
		Created []bool
	}
	require.NoError(t, json.Unmarshal(batch.Body, &sub))
	require.Len(t, sub.Tasks, 2)
	require.Equal(t, []bool{true, true}, sub.Created)
	big := string(bytes.Trim(rawMember(t, sub.Tasks[0], "id"), `"`))
	want := storedJSON(t, s, big, "payload")
	require.Equal(t, string(want), string(rawMember(t, sub.Tasks[0], "payload")))
	var again any
	require.NoError(t, json.Unmarshal(rawMember(t, sub.Tasks[0], "payload"), &again))
	var orig any
	require.NoError(t, json.Unmarshal([]byte(payload), &orig))
	require.Equal(t, orig, again, "the payload round-trips")
	require.Equal(t, "\"é\u2028\"", string(rawMember(t, sub.Tasks[1], "payload")))

	c.Register(jsonObj{"id": "w-big", "queues": []string{"big"}})
	cl := c.Do(http.MethodPost, "/tasks/v1/claim", jsonObj{"worker_id": "w-big", "limit": 2}).Expect(t, http.StatusOK, nil)
	var claim struct{ Tasks []json.RawMessage }
	require.NoError(t, json.Unmarshal(cl.Body, &claim))
	require.Len(t, claim.Tasks, 2)
	require.Equal(t, string(want), string(rawMember(t, claim.Tasks[0], "payload")))
	require.Equal(t, "\"é\u2028\"", string(rawMember(t, claim.Tasks[1], "payload")))
}

func TestAPIProblemsKeepHTMLCharactersUnescaped(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	r := c.Do(http.MethodPost, "/tasks/v1", "{\"queue\": \"q\", \"<b>&\u2028\": 1}")
	p := r.Problem(t, http.StatusBadRequest, "malformed-request")
	require.Equal(t, `unknown field "<b>&\\u2028"`, p.Detail, "the field name is quoted as Go quotes it, twice")
	require.Contains(t, string(r.Body), `"detail":"unknown field \"<b>&\\\\u2028\""`, "<, > and & are not escaped")
}
