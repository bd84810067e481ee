package postgres

import (
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"unicode"
)

// Connection strings, as libpq reads them.
//
// TASKMASTER_DATABASE_URL (and the other database settings) take either form
// libpq takes: a URL, postgres[ql]://[user[:password]@][host[:port][,...]][/dbname][?key=value&...],
// or key=value pairs ("host=h1,h2 port=5432,5433 dbname=tm target_session_attrs=read-write").
// lib/pq, the driver, connects to several hosts in turn, honours
// target_session_attrs and applies connect_timeout to each host, but only
// when the hosts come in the key=value form: its URL parser hands the URL to
// net/url, which misreads "h1:5432,h2:5433" and refuses a percent-encoded
// socket directory. So every connection string is parsed here, by libpq's
// rules (src/interfaces/libpq/fe-connect.c: conninfo_uri_parse_options,
// conninfo_uri_parse_params, conninfo_uri_decode, conninfo_parse), and
// handed to lib/pq in the key=value form, which it reads as libpq does.
//
// Two departures, both lib/pq's: a keyword libpq does not know is not an
// error but a run-time parameter sent to the server at connection start
// (statement_timeout=5000), and a host left empty means localhost, not the
// default Unix socket directory.

// ConnParams are the keywords and values of a connection string.
type ConnParams map[string]string

// ParseConnString parses a connection string in either of libpq's forms: a
// URL starting with postgresql:// or postgres://, or key=value pairs.
func ParseConnString(s string) (ConnParams, error) {
	var (
		p   ConnParams
		err error
	)
	if rest, ok := cutURIPrefix(s); ok {
		p, err = parseURI(rest)
	} else {
		p, err = parseKeyValues(s)
	}
	if err != nil {
		return nil, err
	}
	p.defaultPorts()
	return p, nil
}

// cutURIPrefix returns s without its URI designator, and whether it had one
// (libpq: uri_prefix_length; the designators are case-sensitive).
func cutURIPrefix(s string) (string, bool) {
	for _, prefix := range []string{"postgresql://", "postgres://"} {
		if rest, ok := strings.CutPrefix(s, prefix); ok {
			return rest, true
		}
	}
	return "", false
}

// parseURI parses what follows the URI designator, as libpq's
// conninfo_uri_parse_options does:
//
//	[user[:password]@][netloc[:port]][,netloc[:port]...][/dbname][?params]
//
// user, password, host, port and dbname are percent-decoded; netloc may be
// an IPv6 address in brackets; a host without a port after one with a port
// keeps the default port (defaultPorts).
func parseURI(s string) (ConnParams, error) {
	p := ConnParams{}
	rest := s
	// Credentials: everything before the first '@' that comes before any
	// '/'. Only the first ':' separates the user from the password.
	if i := strings.IndexAny(rest, "@/"); i >= 0 && rest[i] == '@' {
		user, password, hasPassword := strings.Cut(rest[:i], ":")
		if err := p.storeDecoded("user", user); err != nil {
			return nil, err
		}
		if hasPassword {
			if err := p.storeDecoded("password", password); err != nil {
				return nil, err
			}
		}
		rest = rest[i+1:]
	}

	var hosts, ports []string
	var end byte // the character that ended the last netloc: 0, '/' or '?'
	for {
		var host string
		if strings.HasPrefix(rest, "[") {
			closing := strings.IndexByte(rest, ']')
			if closing < 0 {
				return nil, fmt.Errorf("end of string reached when looking for matching \"]\" in IPv6 host address in URI: %q", s)
			}
			if closing == 1 {
				return nil, fmt.Errorf("IPv6 host address may not be empty in URI: %q", s)
			}
			host, rest = rest[1:closing], rest[closing+1:]
			if rest != "" && !strings.ContainsRune(":/?,", rune(rest[0])) {
				return nil, fmt.Errorf("unexpected character %q at position %d in URI (expected \":\" or \"/\"): %q",
					rest[0], len(s)-len(rest)+1, s)
			}
		} else {
			i := indexOrEnd(rest, ":/?,")
			host, rest = rest[:i], rest[i:]
		}
		port := ""
		if strings.HasPrefix(rest, ":") {
			i := indexOrEnd(rest[1:], "/?,") + 1
			port, rest = rest[1:i], rest[i:]
		}
		hosts, ports = append(hosts, host), append(ports, port)
		if !strings.HasPrefix(rest, ",") {
			if rest != "" {
				end = rest[0]
				rest = rest[1:]
			}
			break
		}
		rest = rest[1:]
	}
	if joined := strings.Join(hosts, ","); joined != "" {
		if err := p.storeDecoded("host", joined); err != nil {
			return nil, err
		}
	}
	// libpq stores the port list whenever it is not empty: with two hosts
	// or more it holds at least their commas.
	if joined := strings.Join(ports, ","); joined != "" {
		if err := p.storeDecoded("port", joined); err != nil {
			return nil, err
		}
	}

	if end == '/' {
		dbname, params, hasParams := strings.Cut(rest, "?")
		if err := p.storeDecoded("dbname", dbname); err != nil {
			return nil, err
		}
		if !hasParams {
			return p, nil
		}
		rest, end = params, '?'
	}
	if end == '?' {
		if err := p.parseURIParams(rest); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// parseURIParams parses the query of a URI, as conninfo_uri_parse_params
// does: key=value pairs separated by '&', both percent-decoded ('+' stays a
// plus), later values replacing earlier ones and those of the netloc
// (host=, port=); ssl=true means sslmode=require (for JDBC URLs).
func (p ConnParams) parseURIParams(params string) error {
	for params != "" {
		pair := params
		if i := strings.IndexByte(params, '&'); i >= 0 {
			pair, params = params[:i], params[i+1:]
		} else {
			params = ""
		}
		key, value, ok := strings.Cut(pair, "=")
		if !ok {
			return fmt.Errorf("missing key/value separator \"=\" in URI query parameter: %q", pair)
		}
		if strings.Contains(value, "=") {
			return fmt.Errorf("extra key/value separator \"=\" in URI query parameter: %q", key)
		}
		k, err := uriDecode(key)
		if err != nil {
			return err
		}
		v, err := uriDecode(value)
		if err != nil {
			return err
		}
		if k == "ssl" && v == "true" {
			k, v = "sslmode", "require"
		}
		if k == "" {
			return fmt.Errorf("invalid URI query parameter: %q", pair)
		}
		p[k] = v
	}
	return nil
}

// storeDecoded percent-decodes value and stores it under key, unless it is
// empty (libpq sets no user, password or dbname from an empty part, so the
// defaults apply).
func (p ConnParams) storeDecoded(key, value string) error {
	v, err := uriDecode(value)
	if err != nil {
		return err
	}
	if v != "" {
		p[key] = v
	}
	return nil
}

// uriDecode undoes percent-encoding as conninfo_uri_decode does: %XX with
// two hex digits, %00 refused; everything else, '+' included, as it is.
func uriDecode(s string) (string, error) {
	if !strings.Contains(s, "%") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", fmt.Errorf("invalid percent-encoded token: %q", s)
		}
		hi, okHi := unhex(s[i+1])
		lo, okLo := unhex(s[i+2])
		if !okHi || !okLo {
			return "", fmt.Errorf("invalid percent-encoded token: %q", s)
		}
		c := hi<<4 | lo
		if c == 0 {
			return "", fmt.Errorf("forbidden value %%00 in percent-encoded value: %q", s)
		}
		b.WriteByte(c)
		i += 2
	}
	return b.String(), nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// indexOrEnd is the index of the first of chars in s, or len(s).
func indexOrEnd(s, chars string) int {
	if i := strings.IndexAny(s, chars); i >= 0 {
		return i
	}
	return len(s)
}

// parseKeyValues parses the key=value form as conninfo_parse does: pairs
// separated by whitespace, optional whitespace around '=', a value either
// single-quoted (\' and \\ escaped, whitespace kept) or unquoted up to the
// next whitespace (a backslash escapes the next character); a pair of
// quotes with nothing between is an empty value.
func parseKeyValues(s string) (ConnParams, error) {
	p := ConnParams{}
	r := []rune(s)
	i := 0
	skipSpaces := func() {
		for i < len(r) && unicode.IsSpace(r[i]) {
			i++
		}
	}
	for {
		skipSpaces()
		if i >= len(r) {
			return p, nil
		}
		start := i
		for i < len(r) && !unicode.IsSpace(r[i]) && r[i] != '=' {
			i++
		}
		key := string(r[start:i])
		if key == "" {
			return nil, errors.New("invalid connection option \"\" (a key is missing before \"=\")")
		}
		skipSpaces()
		if i >= len(r) || r[i] != '=' {
			return nil, fmt.Errorf("missing \"=\" after %q in connection info string", key)
		}
		i++
		skipSpaces()
		var value []rune
		if i < len(r) && r[i] == '\'' {
			i++
			for {
				if i >= len(r) {
					return nil, errors.New("unterminated quoted string in connection info string")
				}
				c := r[i]
				i++
				if c == '\'' {
					break
				}
				if c == '\\' && i < len(r) {
					c = r[i]
					i++
				}
				value = append(value, c)
			}
		} else {
			for i < len(r) && !unicode.IsSpace(r[i]) {
				c := r[i]
				i++
				if c == '\\' {
					if i >= len(r) {
						break // a trailing backslash escapes nothing
					}
					c = r[i]
					i++
				}
				value = append(value, c)
			}
		}
		p[key] = string(value)
	}
}

// defaultPorts gives every host of a list its port, as libpq does: an empty
// item of a port list is the default port (lib/pq would refuse an empty
// first item), and a list of nothing but empty items is no port at all.
func (p ConnParams) defaultPorts() {
	ports, ok := p["port"]
	if !ok || !strings.Contains(ports, ",") && ports != "" {
		return
	}
	items := strings.Split(ports, ",")
	anySet := false
	for _, it := range items {
		anySet = anySet || it != ""
	}
	if !anySet {
		delete(p, "port")
		return
	}
	for i, it := range items {
		if it == "" {
			items[i] = defaultPort
		}
	}
	p["port"] = strings.Join(items, ",")
}

// defaultPort is libpq's DEF_PGPORT.
const defaultPort = "5432"

// CheckDriverSupport refuses what the driver parses but mishandles:
// target_session_attrs=prefer-standby, with which lib/pq 1.12 tries its
// hosts again and again, forever, while none answers (it retries as "any"
// without leaving the loop), so a request would hang instead of failing.
func (p ConnParams) CheckDriverSupport() error {
	if p["target_session_attrs"] == "prefer-standby" {
		return errors.New(`target_session_attrs=prefer-standby is not supported (lib/pq retries forever when no host answers); use "any" or "standby"`)
	}
	return nil
}

// Hosts returns the host list: one "host:port" per host, in order (the
// default host and port where the string names none). For logs: it holds
// no credentials.
func (p ConnParams) Hosts() []string {
	hosts := strings.Split(p["host"], ",")
	ports := strings.Split(p["port"], ",")
	out := make([]string, len(hosts))
	for i, h := range hosts {
		if h == "" {
			h = "localhost"
		}
		port := defaultPort
		switch {
		case len(ports) == len(hosts) && ports[i] != "":
			port = ports[i]
		case len(ports) == 1 && ports[0] != "":
			port = ports[0]
		}
		if strings.HasPrefix(h, "/") || strings.HasPrefix(h, "@") {
			out[i] = h + ":" + port // a socket directory
		} else {
			out[i] = net.JoinHostPort(h, port)
		}
	}
	return out
}

// String returns p in the key=value form, keys sorted, every value quoted.
func (p ConnParams) String() string {
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	quote := strings.NewReplacer(`\`, `\\`, `'`, `\'`)
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(k)
		b.WriteString("='")
		b.WriteString(quote.Replace(p[k]))
		b.WriteByte('\'')
	}
	return b.String()
}
