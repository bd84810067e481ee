// Package jsontext appends JSON text byte for byte as encoding/json writes
// it, for the bodies the server writes by hand on its hot paths (responses,
// outbox messages): strings, times and floats. Callers write their own
// objects around them and fall back to encoding/json where these refuse
// (times outside years 0-9999, floats that are not finite), as
// encoding/json refuses them.
package jsontext

import (
	"math"
	"strconv"
	"time"
	"unicode/utf8"
)

const hexDigits = "0123456789abcdef"

// safe marks the ASCII bytes a JSON string holds as they are: plain for
// encoding/json with HTML escaping off, html with it on (the default of
// json.Marshal), which also escapes <, > and &.
var safe, safeHTML = func() (plain, html [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		plain[c] = c != '"' && c != '\\'
		html[c] = plain[c] && c != '<' && c != '>' && c != '&'
	}
	return plain, html
}()

// AppendString appends s as a JSON string, escaped as encoding/json escapes
// it: ", \ and control characters, U+2028 and U+2029, invalid UTF-8 as
// U+FFFD, and with escapeHTML <, > and & (as \u003c, \u003e, \u0026).
func AppendString(b []byte, s string, escapeHTML bool) []byte {
	ok := &safe
	if escapeHTML {
		ok = &safeHTML
	}
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if ok[c] {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// AppendTime appends t as time.Time's MarshalJSON does (RFC 3339 with
// nanoseconds, trailing zeros dropped); TimeOK tells the times it refuses.
func AppendTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

// TimeOK reports whether encoding/json encodes t: years 0 to 9999.
func TimeOK(t time.Time) bool {
	y := t.Year()
	return y >= 0 && y <= 9999
}

// AppendFloat appends f as encoding/json encodes a float64: the shortest
// representation that reads back as f, in exponent form below 1e-6 and
// from 1e21 on, the exponent not padded (e-7, not e-07); FloatOK tells the
// values it refuses.
func AppendFloat(b []byte, f float64) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// e-07 to e-7, as encoding/json cleans it up.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// FloatOK reports whether encoding/json encodes f: finite values only.
func FloatOK(f float64) bool {
	return !math.IsInf(f, 0) && !math.IsNaN(f)
}
