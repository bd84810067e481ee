package outbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/taskmaster/taskmaster/adapters/outbox/envelope"
	"github.com/taskmaster/taskmaster/domain/event"
)

// The projections read a few fields of each event (type, queue, queues,
// from, to, reason, schedule, occurred_at and the durations), at up to hundreds of
// thousands of events a second. encoding/json decodes an event in several
// microseconds (it validates and reflects); this scanner reads the outbox's
// JSON in one pass, skips the fields no projection reads, and interns the
// few distinct strings (queues, types, statuses, reasons), in a fraction of
// that. It yields exactly what encoding/json would decode into those fields
// of event.Event (FuzzScanAgreesWithEncodingJSON checks it): whenever the
// input is anything but the plain shape the publisher writes (a key that
// differs from a field's name only in case, a value of an unexpected type),
// it hands the message to encoding/json instead.
//
// PostgreSQL has validated every payload as JSON (the column is json), so
// the scanner may trust the syntax; it still never reads out of bounds, and
// reports an error on anything it does not understand.

// errScan reports input the scanner does not understand.
var errScan = errors.New("outbox batch: unexpected JSON")

// scanner reads JSON from b at i.
type scanner struct {
	b []byte
	i int
	// strings interns the strings of the fields it keeps; last caches the
	// last string read into each field (consecutive events repeat them).
	strings map[string]string
	last    [numStringFields]struct {
		raw []byte
		v   string
	}
	// lastTime caches the last occurred_at (a message's events share it).
	lastTimeRaw []byte
	lastMinute  int64
}

// The string fields of an event the scanner keeps, as cache slots.
const (
	fieldType = iota
	fieldQueue
	fieldFrom
	fieldTo
	fieldReason
	fieldQueues
	fieldSchedule
	numStringFields
)

func newScanner(b []byte) *scanner {
	return &scanner{b: b, strings: map[string]string{}}
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek returns the next byte after white space, or 0 at the end.
func (s *scanner) peek() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

func (s *scanner) consume(c byte) bool {
	if s.peek() == c {
		s.i++
		return true
	}
	return false
}

// literal consumes the literal lit (null, true, false).
func (s *scanner) literal(lit string) bool {
	s.ws()
	if bytes.HasPrefix(s.b[s.i:], []byte(lit)) {
		s.i += len(lit)
		return true
	}
	return false
}

// rawString reads a string and returns it with its quotes, and whether it
// holds escapes.
func (s *scanner) rawString() ([]byte, bool, error) {
	if s.peek() != '"' {
		return nil, false, errScan
	}
	start := s.i
	escaped := false
	// A byte loop: the strings are short, shorter than a call to
	// bytes.IndexByte pays off for.
	for i := s.i + 1; i < len(s.b); i++ {
		switch s.b[i] {
		case '"':
			s.i = i + 1
			return s.b[start:s.i], escaped, nil
		case '\\':
			escaped = true
			i++ // the escaped byte
		}
	}
	return nil, false, errScan
}

// str reads a string into field slot f and returns its value, interned.
func (s *scanner) str(f int) (string, error) {
	raw, escaped, err := s.rawString()
	if err != nil {
		return "", err
	}
	if c := &s.last[f]; bytes.Equal(raw, c.raw) {
		return c.v, nil
	}
	var v string
	if !escaped {
		if in, ok := s.strings[string(raw[1:len(raw)-1])]; ok {
			v = in
		} else {
			v = string(raw[1 : len(raw)-1])
			s.strings[v] = v
		}
	} else {
		if err := json.Unmarshal(raw, &v); err != nil {
			return "", errScan
		}
		if in, ok := s.strings[v]; ok {
			v = in
		} else {
			s.strings[v] = v
		}
	}
	s.last[f].raw, s.last[f].v = raw, v
	return v, nil
}

// optString reads a string or null (which leaves *dst as it is, as
// encoding/json does) into field slot f.
func (s *scanner) optString(f int, dst *string) error {
	if s.literal("null") {
		return nil
	}
	v, err := s.str(f)
	if err != nil {
		return err
	}
	*dst = v
	return nil
}

// number returns the bytes of a number.
func (s *scanner) number() ([]byte, error) {
	s.ws()
	start := s.i
	for s.i < len(s.b) {
		switch c := s.b[s.i]; {
		case c >= '0' && c <= '9', c == '-', c == '+', c == '.', c == 'e', c == 'E':
			s.i++
			continue
		}
		break
	}
	if s.i == start {
		return nil, errScan
	}
	return s.b[start:s.i], nil
}

// optFloat reads a number or null into duration i of e (null: none, as
// encoding/json sets a nil pointer).
func (s *scanner) optFloat(e *scannedEvent, i int) error {
	if s.literal("null") {
		e.has &^= 1 << i
		return nil
	}
	raw, err := s.number()
	if err != nil {
		return err
	}
	v, err := strconv.ParseFloat(string(raw), 64)
	if err != nil {
		return errScan // out of range: encoding/json fails too
	}
	e.has |= 1 << i
	e.durations[i] = v
	return nil
}

// skip steps over any value.
func (s *scanner) skip() error {
	switch s.peek() {
	case '"':
		_, _, err := s.rawString()
		return err
	case '{', '[':
		depth := 0
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case '{', '[':
				depth++
				s.i++
			case '}', ']':
				depth--
				s.i++
				if depth == 0 {
					return nil
				}
			case '"':
				if _, _, err := s.rawString(); err != nil {
					return err
				}
			default:
				s.i++
			}
		}
		return errScan
	case 't':
		if s.literal("true") {
			return nil
		}
	case 'f':
		if s.literal("false") {
			return nil
		}
	case 'n':
		if s.literal("null") {
			return nil
		}
	default:
		_, err := s.number()
		return err
	}
	return errScan
}

// object calls field with each key of an object (positioned on its value,
// which field must consume). A null object calls nothing.
func (s *scanner) object(field func(key []byte) error) error {
	if s.literal("null") {
		return nil
	}
	if !s.consume('{') {
		return errScan
	}
	if s.consume('}') {
		return nil
	}
	for {
		raw, escaped, err := s.rawString()
		if err != nil {
			return err
		}
		if escaped {
			return errScan // a key with escapes: leave it to encoding/json
		}
		if !s.consume(':') {
			return errScan
		}
		if err := field(raw[1 : len(raw)-1]); err != nil {
			return err
		}
		if s.consume(',') {
			continue
		}
		if s.consume('}') {
			return nil
		}
		return errScan
	}
}

// array calls elem for each element of an array (positioned on it). A null
// array calls nothing.
func (s *scanner) array(elem func() error) error {
	if s.literal("null") {
		return nil
	}
	if !s.consume('[') {
		return errScan
	}
	if s.consume(']') {
		return nil
	}
	for {
		if err := elem(); err != nil {
			return err
		}
		if s.consume(',') {
			continue
		}
		if s.consume(']') {
			return nil
		}
		return errScan
	}
}

// skipField steps over the value of a field of event.Event that the
// projections do not read, checking its type as encoding/json would (a
// mistyped value makes encoding/json fail, and the message undecodable). It
// reports false for a key that is no such field. A field of a kind it does
// not check sends the message to encoding/json.
func (s *scanner) skipField(key []byte) (bool, error) {
	kind, ok := skippedFields[string(key)]
	if !ok {
		return false, nil
	}
	if s.literal("null") {
		return true, nil
	}
	switch kind {
	case reflect.String:
		_, _, err := s.rawString()
		return true, err
	case reflect.Int, reflect.Int64:
		raw, err := s.number()
		if err != nil {
			return true, err
		}
		if _, err := strconv.ParseInt(string(raw), 10, 64); err != nil {
			return true, errScan
		}
		return true, nil
	case reflect.Float64:
		raw, err := s.number()
		if err != nil {
			return true, err
		}
		if _, err := strconv.ParseFloat(string(raw), 64); err != nil {
			return true, errScan // out of range: encoding/json fails too
		}
		return true, nil
	case reflect.Map:
		// A map of strings (metadata, filter): an object whose values are
		// strings, or null (encoding/json stores "").
		return true, s.object(func([]byte) error {
			if s.literal("null") {
				return nil
			}
			_, _, err := s.rawString()
			return err
		})
	}
	return true, errScan
}

// readFields are the JSON names of the event fields the scanner reads.
var readFields = []string{"type", "task_id", "workflow_id", "queue", "queues", "from", "to", "reason", "schedule", "occurred_at",
	"queue_wait_seconds", "execution_seconds", "end_to_end_seconds"}

// eventFields are the JSON names of every field of event.Event, and
// skippedFields the kinds of those the scanner does not read. They come
// from the type itself, so that a field added to events is checked as
// encoding/json would check it. A pointer field has its element's kind (the
// scanner accepts null for any field, as encoding/json does for a pointer).
var eventFields, skippedFields = func() ([]string, map[string]reflect.Kind) {
	var names []string
	skipped := map[string]reflect.Kind{}
	t := reflect.TypeFor[event.Event]()
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" || !f.IsExported() {
			continue
		}
		names = append(names, name)
		if !slices.Contains(readFields, name) {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			kind := ft.Kind()
			if kind == reflect.Map && (ft.Key().Kind() != reflect.String || ft.Elem().Kind() != reflect.String) {
				kind = reflect.Invalid // checked by encoding/json
			}
			skipped[name] = kind
		}
	}
	return names, skipped
}()

// foldsToField reports whether key matches a field (or the envelope's
// events) only case-insensitively: encoding/json would decode it into that
// field.
func foldsToField(key []byte) bool {
	for _, f := range eventFields {
		if bytes.EqualFold(key, []byte(f)) {
			return true
		}
	}
	return bytes.EqualFold(key, []byte("events"))
}

// scannedEvent holds what the scanner keeps of an event.
type scannedEvent struct {
	typ, queue, from, to, reason, schedule string
	// taskID is the task id as it stands in the payload (not interned:
	// ids do not repeat), or decoded when it holds escapes; workflowID
	// the same of the run's id.
	taskID, workflowID []byte
	queues             []string
	minute             int64
	has                uint8
	durations          [3]float64
}

// id reads an id's string (a null leaves dst as it is): the bytes as they
// stand in the payload, or decoded when they hold escapes.
func (s *scanner) id(dst *[]byte) error {
	if s.literal("null") {
		return nil
	}
	raw, escaped, err := s.rawString()
	if err != nil {
		return err
	}
	if !escaped {
		*dst = raw[1 : len(raw)-1]
		return nil
	}
	var v string
	if err := json.Unmarshal(raw, &v); err != nil {
		return errScan
	}
	*dst = []byte(v)
	return nil
}

// event reads one event object.
func (s *scanner) event(e *scannedEvent) error {
	return s.object(func(key []byte) error {
		switch string(key) {
		case "type":
			return s.optString(fieldType, &e.typ)
		case "task_id":
			return s.id(&e.taskID)
		case "workflow_id":
			return s.id(&e.workflowID)
		case "queue":
			return s.optString(fieldQueue, &e.queue)
		case "from":
			return s.optString(fieldFrom, &e.from)
		case "to":
			return s.optString(fieldTo, &e.to)
		case "reason":
			return s.optString(fieldReason, &e.reason)
		case "schedule":
			return s.optString(fieldSchedule, &e.schedule)
		case "queues":
			if s.literal("null") {
				e.queues = nil
				return nil
			}
			queues := []string{}
			if err := s.array(func() error {
				var q string
				if err := s.optString(fieldQueues, &q); err != nil {
					return err
				}
				queues = append(queues, q)
				return nil
			}); err != nil {
				return err
			}
			e.queues = queues
			return nil
		case "occurred_at":
			if s.literal("null") {
				return nil
			}
			raw, _, err := s.rawString()
			if err != nil {
				return err
			}
			if !bytes.Equal(raw, s.lastTimeRaw) {
				var t time.Time
				if err := t.UnmarshalJSON(raw); err != nil {
					return errScan
				}
				s.lastTimeRaw, s.lastMinute = raw, minuteOf(t).Unix()
			}
			e.minute = s.lastMinute
			return nil
		case "queue_wait_seconds":
			return s.optFloat(e, 0)
		case "execution_seconds":
			return s.optFloat(e, 1)
		case "end_to_end_seconds":
			return s.optFloat(e, 2)
		}
		if known, err := s.skipField(key); known {
			return err
		}
		if foldsToField(key) {
			return errScan
		}
		return s.skip()
	})
}

// events reads an outbox payload ({"events": [...]}) and calls fn with each
// event: its JSON and what the scanner keeps of it.
func (s *scanner) events(fn func(raw []byte, e *scannedEvent)) error {
	seen := false
	return s.object(func(key []byte) error {
		if string(key) != "events" {
			if foldsToField(key) {
				return errScan
			}
			return s.skip()
		}
		if seen {
			return errScan // encoding/json would merge the two lists
		}
		seen = true
		return s.array(func() error {
			e := scannedEvent{minute: zeroMinute}
			s.ws()
			start := s.i
			if err := s.event(&e); err != nil {
				return err
			}
			fn(s.b[start:s.i], &e)
			return nil
		})
	})
}

// payload reads an outbox payload and returns its events, compacted into
// classes of t.
func (s *scanner) payload(t *classTable) ([]compactEvent, error) {
	var out []compactEvent
	err := s.events(func(_ []byte, e *scannedEvent) { out = append(out, t.compactScanned(e)) })
	return out, err
}

// zeroMinute is the minute of the zero time (an event without occurred_at).
var zeroMinute = minuteOf(time.Time{}).Unix()

// scanBatch reads a batch ([[transaction id, offset, payload], ...], see
// batchSchema). A payload the scanner does not understand is decoded by
// encoding/json (whose error, if any, is the message's DecodeErr).
func scanBatch(b []byte) (*Batch, error) {
	s := newScanner(b)
	batch := newBatch()
	err := s.array(func() error {
		if !s.consume('[') {
			return errScan
		}
		raw, escaped, err := s.rawString()
		if err != nil || escaped {
			return errScan
		}
		var pos Position
		if pos.TransactionID, err = strconv.ParseUint(string(raw[1:len(raw)-1]), 10, 64); err != nil {
			return errScan
		}
		if !s.consume(',') {
			return errScan
		}
		off, err := s.number()
		if err != nil {
			return err
		}
		if pos.Offset, err = strconv.ParseInt(string(off), 10, 64); err != nil {
			return errScan
		}
		if !s.consume(',') {
			return errScan
		}
		s.ws()
		start := s.i
		events, err := s.payload(batch.classes)
		if err != nil {
			// Not the plain shape: step over it and let encoding/json decide.
			s.i = start
			if err := s.skip(); err != nil {
				return err
			}
			payload := b[start:s.i]
			decoded, derr := envelope.Decode(payload)
			batch.add(pos, payload, decoded, derr)
		} else {
			batch.Messages = append(batch.Messages, Message{Position: pos, Payload: b[start:s.i], events: events})
		}
		if !s.consume(']') {
			return errScan
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w at byte %d", err, s.i)
	}
	return batch, nil
}
