package postgres

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// Which JSON values PostgreSQL's jsonb can hold is the adapter's knowledge.
// encoding/json accepts valid JSON that jsonb refuses: strings (or keys)
// with a \u0000 escape, unpaired UTF-16 surrogate escapes (Go's decoder
// silently replaces them with U+FFFD, so only the raw escapes tell), and
// numbers outside numeric's range. Sent to PostgreSQL, such a value fails
// the statement (SQLSTATE class 22), which in a batch fails every item with
// it. JSONStoredSize decides it in Go instead, mirroring PostgreSQL 15's
// json lexer (src/common/jsonapi.c) and numeric_in (set_var_from_str,
// make_result); TestJSONStoredSizeAgreesWithPostgreSQL and
// FuzzJSONStoredSizeAgreesWithPostgreSQL compare it with SELECT $1::jsonb
// on the real database.
//
// Three limits are policy, not PostgreSQL's rules, because what PostgreSQL
// does there depends on its configuration or is a resource hazard:
//
//   - Nesting deeper than MaxJSONDepth. PostgreSQL parses JSON recursively
//     and fails with "stack depth limit exceeded" (SQLSTATE 54001) at a
//     depth that depends on max_stack_depth: about 12,000 levels at the
//     default 2 MB, about 600 at its 100 kB minimum.
//   - A number whose rendering is more than MaxNumberGrowth bytes longer
//     than its text. jsonb keeps numbers with every digit: 1e131071 is 8
//     bytes of JSON and 131,072 digits once stored, and every read of the
//     task (listings, claims, the dashboard) carries them, so 23 KB of
//     such numbers in a batch made a 334 MB answer. Every float64, in any
//     notation, stays within the limit (5e-324 renders as 326 bytes).
//   - A stored text longer than MaxStoredJSONBytes (PostgreSQL's own limit,
//     268,435,455 bytes per jsonb container, is SQLSTATE 54000).
//
// jsonRenderedSize is the mirror without the last two; the differential
// target compares it with PostgreSQL, and JSONStoredSize adds them.

// PostgreSQL numeric's range (NUMERIC_WEIGHT_MAX, NUMERIC_DSCALE_MAX).
const (
	// numericMaxIntDigits is the most digits before the decimal point.
	numericMaxIntDigits = 131072
	// numericMaxScale is the most digits after the decimal point.
	numericMaxScale = 16383
	// numericMaxExponent bounds the exponent numeric_in parses at all
	// (INT_MAX / 2), whatever the digits (0e1073741823 is refused).
	numericMaxExponent = 1<<30 - 1
)

// Policy limits on the JSON values a task stores (see above).
const (
	// MaxJSONDepth is the deepest nesting of arrays and objects accepted.
	MaxJSONDepth = 512
	// MaxStoredJSONBytes is the longest text a stored JSON value may take
	// (PostgreSQL's rendering of it, which responses carry).
	MaxStoredJSONBytes = 32 << 20
	// MaxNumberGrowth is how many bytes longer than its text a number's
	// rendering may be.
	MaxNumberGrowth = 400
)

// Why a JSON value cannot be stored. Their texts end up in 422 problems.
var (
	errJSONSyntax    = errors.New("must be valid JSON")
	errJSONUTF8      = errors.New("must be valid UTF-8")
	errJSONNUL       = errors.New(`must not contain \u0000 (in a string or a key): PostgreSQL's jsonb cannot hold it`)
	errJSONSurrogate = errors.New(`must not contain an unpaired UTF-16 surrogate escape (\ud800-\udfff): PostgreSQL's jsonb cannot hold it`)
	errJSONNumber    = fmt.Errorf("must hold only numbers within PostgreSQL's numeric range: at most %d digits before the decimal point and %d after, exponent included", numericMaxIntDigits, numericMaxScale)
	errJSONDepth     = fmt.Errorf("must not nest arrays and objects more than %d levels deep", MaxJSONDepth)
	errJSONTooBig    = fmt.Errorf("must take at most %d bytes once stored (numbers are stored with every digit: 1e100000 takes 100,001)", MaxStoredJSONBytes)
)

// NumberGrowthError is why a JSON value with a number that renders far
// longer than it is written cannot be stored (the MaxNumberGrowth policy).
type NumberGrowthError struct {
	// Number is the number's text (cut to 40 bytes).
	Number string
	// Written and Stored are its length in the JSON and once stored.
	Written, Stored int64
}

// Error implements error.
func (e *NumberGrowthError) Error() string {
	return fmt.Sprintf("must not hold a number whose stored form is more than %d bytes longer than written "+
		"(numbers are stored with every digit): %s is %d bytes written and %d stored; write it out, or as a string",
		MaxNumberGrowth, e.Number, e.Written, e.Stored)
}

// JSONStoredSize reports whether PostgreSQL's jsonb can hold the JSON text
// raw (within the policy limits above) and, when it can, the length in bytes
// of the text PostgreSQL renders for it (jsonb_out: keys de-duplicated, the
// last one kept; ", " and ": " separators; strings re-escaped; numbers in
// numeric's notation). The error says why not.
func JSONStoredSize(raw []byte) (int64, error) {
	s, n, err := jsonRenderedSize(raw)
	if err != nil {
		return 0, err
	}
	if s.growth > MaxNumberGrowth {
		num := string(raw[s.growthAt : s.growthAt+int(s.growthLen)])
		if len(num) > 40 {
			num = num[:37] + "..."
		}
		return 0, &NumberGrowthError{Number: num, Written: s.growthLen, Stored: s.growthLen + s.growth}
	}
	if n > MaxStoredJSONBytes {
		return 0, errJSONTooBig
	}
	return n, nil
}

// jsonRenderedSize is JSONStoredSize without its size policies (the
// numbers' growth, the stored text's length): the mirror of what
// PostgreSQL's jsonb accepts and of its rendering's length, with the scan
// (which knows the number that grew most).
func jsonRenderedSize(raw []byte) (*jsonScan, int64, error) {
	if !utf8.Valid(raw) {
		return nil, 0, errJSONUTF8
	}
	s := &jsonScan{b: raw}
	s.space()
	n, err := s.value(0)
	if err != nil {
		return nil, 0, err
	}
	s.space()
	if s.i != len(s.b) {
		return nil, 0, errJSONSyntax
	}
	return s, n, nil
}

// jsonScan walks a JSON text, computing the length of PostgreSQL's
// rendering of each value.
type jsonScan struct {
	b []byte
	i int
	// growth is the most a number's rendering exceeds its text by: the
	// number at offset growthAt, growthLen bytes long.
	growth, growthLen int64
	growthAt          int
}

func (s *jsonScan) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// value reads the value at s.i, nested depth levels deep, and returns the
// length of its rendering.
func (s *jsonScan) value(depth int) (int64, error) {
	if s.i >= len(s.b) {
		return 0, errJSONSyntax
	}
	switch c := s.b[s.i]; {
	case c == '{' || c == '[':
		if depth+1 > MaxJSONDepth {
			return 0, errJSONDepth
		}
		if c == '{' {
			return s.object(depth + 1)
		}
		return s.array(depth + 1)
	case c == '"':
		_, n, err := s.str(false)
		return n, err
	case c == '-' || (c >= '0' && c <= '9'):
		start := s.i
		n, err := s.number()
		if written := int64(s.i - start); err == nil && n-written > s.growth {
			s.growth, s.growthAt, s.growthLen = n-written, start, written
		}
		return n, err
	default:
		for _, lit := range []string{"true", "false", "null"} {
			if len(s.b)-s.i >= len(lit) && string(s.b[s.i:s.i+len(lit)]) == lit {
				s.i += len(lit)
				return int64(len(lit)), nil
			}
		}
		return 0, errJSONSyntax
	}
}

// object reads {...}: its rendering is {"k": v, ...} over the distinct keys,
// each with its last value.
func (s *jsonScan) object(depth int) (int64, error) {
	s.i++
	s.space()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return 2, nil
	}
	kept := map[string]int64{}
	for {
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return 0, errJSONSyntax
		}
		key, kn, err := s.str(true)
		if err != nil {
			return 0, err
		}
		s.space()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return 0, errJSONSyntax
		}
		s.i++
		s.space()
		vn, err := s.value(depth)
		if err != nil {
			return 0, err
		}
		kept[key] = kn + 2 + vn // `key: value`; a repeated key keeps the last
		s.space()
		if s.i >= len(s.b) {
			return 0, errJSONSyntax
		}
		switch s.b[s.i] {
		case ',':
			s.i++
			s.space()
			continue
		case '}':
			s.i++
			n := int64(2 + 2*(len(kept)-1))
			for _, pair := range kept {
				n += pair
			}
			return n, nil
		default:
			return 0, errJSONSyntax
		}
	}
}

// array reads [...]: its rendering is [v, ...].
func (s *jsonScan) array(depth int) (int64, error) {
	s.i++
	s.space()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		return 2, nil
	}
	n := int64(2)
	for first := true; ; first = false {
		vn, err := s.value(depth)
		if err != nil {
			return 0, err
		}
		n += vn
		if !first {
			n += 2 // ", "
		}
		s.space()
		if s.i >= len(s.b) {
			return 0, errJSONSyntax
		}
		switch s.b[s.i] {
		case ',':
			s.i++
			s.space()
		case ']':
			s.i++
			return n, nil
		default:
			return 0, errJSONSyntax
		}
	}
}

// str reads a string and returns it decoded (when key, for de-duplicating
// object keys) and the length of its rendering (escape_json).
func (s *jsonScan) str(key bool) (string, int64, error) {
	s.i++ // the opening quote
	n := int64(2)
	var decoded []byte
	high := rune(-1) // a high surrogate escape waiting for its low half
	for {
		if s.i >= len(s.b) {
			return "", 0, errJSONSyntax
		}
		c := s.b[s.i]
		switch {
		case c == '"':
			if high >= 0 {
				return "", 0, errJSONSurrogate
			}
			s.i++
			return string(decoded), n, nil
		case c < 0x20:
			return "", 0, errJSONSyntax
		case c != '\\':
			if high >= 0 {
				return "", 0, errJSONSurrogate
			}
			n++ // a byte of UTF-8, kept as is
			if key {
				decoded = append(decoded, c)
			}
			s.i++
			continue
		}
		if s.i+1 >= len(s.b) {
			return "", 0, errJSONSyntax
		}
		var r rune
		switch e := s.b[s.i+1]; e {
		case '"', '\\', '/':
			r = rune(e)
			s.i += 2
		case 'b':
			r = '\b'
			s.i += 2
		case 'f':
			r = '\f'
			s.i += 2
		case 'n':
			r = '\n'
			s.i += 2
		case 'r':
			r = '\r'
			s.i += 2
		case 't':
			r = '\t'
			s.i += 2
		case 'u':
			u, ok := hex4(s.b[s.i+2:])
			if !ok {
				return "", 0, errJSONSyntax
			}
			s.i += 6
			switch {
			case u >= 0xD800 && u <= 0xDBFF:
				if high >= 0 {
					return "", 0, errJSONSurrogate
				}
				high = u
				continue
			case u >= 0xDC00 && u <= 0xDFFF:
				if high < 0 {
					return "", 0, errJSONSurrogate
				}
				u = 0x10000 + (high-0xD800)<<10 + (u - 0xDC00)
				high = -1
			}
			if u == 0 {
				return "", 0, errJSONNUL
			}
			r = u
		default:
			return "", 0, errJSONSyntax
		}
		if high >= 0 {
			return "", 0, errJSONSurrogate
		}
		n += escapedLen(r)
		if key {
			decoded = utf8.AppendRune(decoded, r)
		}
	}
}

// escapedLen is how many bytes PostgreSQL's escape_json writes for r.
func escapedLen(r rune) int64 {
	switch {
	case r == '"' || r == '\\' || r == '\b' || r == '\f' || r == '\n' || r == '\r' || r == '\t':
		return 2
	case r < 0x20:
		return 6 // \u00XX
	default:
		return int64(utf8.RuneLen(r))
	}
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(d)
	}
	return r, true
}

// number reads a JSON number and checks it the way numeric_in does: the
// exponent must be under INT_MAX/2 whatever the digits, the value at most
// numericMaxIntDigits digits before the decimal point, and its display
// scale (digits after the point, minus the exponent) at most
// numericMaxScale. It returns the length of numeric_out's rendering: the
// sign (not for zero), the integer digits (at least "0"), then the point
// and the scale's digits, exponent expanded.
func (s *jsonScan) number() (int64, error) {
	neg := false
	if s.b[s.i] == '-' {
		neg = true
		s.i++
	}
	intStart := s.i
	switch {
	case s.i < len(s.b) && s.b[s.i] == '0':
		s.i++
	case s.i < len(s.b) && s.b[s.i] >= '1' && s.b[s.i] <= '9':
		s.digits()
	default:
		return 0, errJSONSyntax
	}
	intDigits := s.b[intStart:s.i]
	var fracDigits []byte
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		start := s.i
		if s.digits() == 0 {
			return 0, errJSONSyntax
		}
		fracDigits = s.b[start:s.i]
	}
	exp := int64(0)
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		expNeg := false
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			expNeg = s.b[s.i] == '-'
			s.i++
		}
		start := s.i
		if s.digits() == 0 {
			return 0, errJSONSyntax
		}
		for _, d := range s.b[start:s.i] {
			exp = exp*10 + int64(d-'0')
			if exp >= numericMaxExponent { // strtol saturates; any more is refused alike
				return 0, errJSONNumber
			}
		}
		if expNeg {
			exp = -exp
		}
	}
	scale := max(0, int64(len(fracDigits))-exp)
	if scale > numericMaxScale {
		return 0, errJSONNumber
	}
	// The power of ten of the first significant digit.
	first := -1
	for k, d := range intDigits {
		if d != '0' {
			first = k
			break
		}
	}
	if first < 0 {
		for k, d := range fracDigits {
			if d != '0' {
				first = len(intDigits) + k
				break
			}
		}
	}
	var n int64
	if scale > 0 {
		n = 1 + scale
	}
	if first < 0 { // zero: no sign, weight 0
		return n + 1, nil
	}
	p := int64(len(intDigits)) - 1 - int64(first) + exp
	if p >= numericMaxIntDigits {
		return 0, errJSONNumber
	}
	if neg {
		n++
	}
	if p >= 0 {
		return n + p + 1, nil
	}
	return n + 1, nil
}

// digits skips decimal digits and returns how many.
func (s *jsonScan) digits() int {
	start := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i - start
}
