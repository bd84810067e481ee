package application

import (
	"encoding/json"
	"fmt"

	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
	"github.com/taskmaster/taskmaster/ports"
)

// A request's JSON values (payloads, results, the payloads of the tasks it
// enqueues) take, once stored, what storage renders of them, which every
// later read of the tasks carries (listings, claims, the dashboard): jsonb
// keeps every digit of a number. Storage refuses, value by value, what it
// cannot hold and numbers whose stored form is far longer than written
// (ports.TaskStore.StoredJSONSize). On top of that, the values one request
// stores together may take at most MaxStoredJSONFactor times the bytes
// they take in the request, plus StoredJSONAllowance: what a request makes
// the server store, and answer with, is bounded by its body.
const (
	// MaxStoredJSONFactor bounds a request's stored JSON by its size in the
	// request. JSON without exponents stores at most 1.5 times its compact
	// text (the ", " and ": " separators); arrays of small floats in
	// exponent notation (1e-20: 22 bytes stored) take up to 4.
	MaxStoredJSONFactor = 4
	// StoredJSONAllowance is stored JSON every request may make beyond the
	// factor: a few hundred large floats in a small payload.
	StoredJSONAllowance = 64 << 10
)

// storedJSON checks and counts the JSON values one request stores.
type storedJSON struct {
	st              ports.Stores
	written, stored int64
}

func newStoredJSON(st ports.Stores) *storedJSON { return &storedJSON{st: st} }

// check adds to v, on field, why storage cannot hold raw, and counts it (an
// absent value is stored as none).
func (j *storedJSON) check(v *validation.Errors, field string, raw json.RawMessage) {
	if len(raw) == 0 {
		return
	}
	n, err := j.st.Tasks.StoredJSONSize(raw)
	if err != nil {
		v.Add(field, err.Error())
		return
	}
	j.written += int64(len(raw))
	j.stored += n
}

// payloads checks the payloads of submissions ps ("<list>[i].payload").
func (j *storedJSON) payloads(v *validation.Errors, list string, ps []task.SubmitParams) {
	for i, p := range ps {
		j.check(v, fmt.Sprintf("%s[%d].payload", list, i), p.Payload)
	}
}

// total adds to v, on field, that the values checked would take more than
// the request's allowance once stored together.
func (j *storedJSON) total(v *validation.Errors, field string) {
	if limit := MaxStoredJSONFactor*j.written + StoredJSONAllowance; j.stored > limit {
		v.Add(field, fmt.Sprintf("the JSON values of this request would take %d bytes once stored, more than %d times the %d bytes "+
			"they take in the request plus %d (numbers are stored with every digit: write them out, or as strings)",
			j.stored, MaxStoredJSONFactor, j.written, StoredJSONAllowance))
	}
}

// checkJSON checks one request's only JSON value, raw, on field: storage
// must hold it, within the request's allowance.
func checkJSON(v *validation.Errors, st ports.Stores, field string, raw json.RawMessage) {
	j := newStoredJSON(st)
	j.check(v, field, raw)
	j.total(v, field)
}

// checkPayloads returns a validation error naming every item of ps
// ("<list>[i].payload") whose payload storage cannot hold, and the list
// when they would take more than the request's allowance together.
func checkPayloads(st ports.Stores, list string, ps []task.SubmitParams) error {
	var v validation.Errors
	j := newStoredJSON(st)
	j.payloads(&v, list, ps)
	j.total(&v, list)
	return v.Err()
}
