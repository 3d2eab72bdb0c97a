package client

import (
	"encoding/json"
	"unicode/utf8"
)

// Submission answers are decoded on the producer's hot path, once per job.
// encoding/json takes about 1.4 µs and 8 allocations for a 202 body; the
// answers the shaper writes are flat objects of plain strings, integers and
// booleans, which scanFlat reads in a tenth of that. Anything else (an
// escape in a string, a nested value, a field name that is not exactly the
// contract's) goes to encoding/json, so the result is always what
// json.Unmarshal makes of the answer (FuzzDecode holds the two together).

// decodeAccepted decodes a 202 body into a.
func decodeAccepted(b []byte, a *Accepted) error {
	var v Accepted
	ok := scanFlat(b, func(name []byte, s []byte, n int64, kind byte) bool {
		switch {
		case string(name) == "id" && kind == '"':
			v.ID = string(s)
		case string(name) == "policy" && kind == '"':
			v.Policy = string(s)
		case string(name) == "key" && kind == '"':
			v.Key = string(s)
		case string(name) == "queued" && kind == '0':
			v.Queued = n
		case string(name) == "eta_ms" && kind == '0':
			v.ETAMs = n
		case string(name) == "duplicate" && kind == 't':
			v.Duplicate = n != 0
		default:
			return false
		}
		return true
	})
	if !ok {
		var w Accepted // only here on the heap: a does not escape
		err := json.Unmarshal(b, &w)
		*a = w
		return err
	}
	*a = v
	return nil
}

// decodeReply decodes a NATS submission's reply into r.
func decodeReply(b []byte, r *Reply) error {
	var v Reply
	ok := scanFlat(b, func(name []byte, s []byte, n int64, kind byte) bool {
		switch {
		case string(name) == "status" && kind == '"':
			return v.Status.UnmarshalText(s) == nil
		case string(name) == "id" && kind == '"':
			v.ID = string(s)
		case string(name) == "policy" && kind == '"':
			v.Policy = string(s)
		case string(name) == "key" && kind == '"':
			v.Key = string(s)
		case string(name) == "queued" && kind == '0':
			v.Queued = n
		case string(name) == "eta_ms" && kind == '0':
			v.ETAMs = n
		case string(name) == "retry_after_ms" && kind == '0':
			v.RetryAfterMs = n
		case string(name) == "deferred" && kind == 't':
			v.Deferred = n != 0
		case string(name) == "duplicate" && kind == 't':
			v.Duplicate = n != 0
		case string(name) == "code" && kind == '0' && n == int64(int(n)):
			v.Code = int(n)
		case string(name) == "error" && kind == '"':
			v.Error = string(s)
		default:
			return false
		}
		return true
	})
	if !ok {
		var w Reply
		err := json.Unmarshal(b, &w)
		*r = w
		return err
	}
	*r = v
	return nil
}

// scanFlat reads b as one JSON object whose values are strings without
// escapes (kind '"', in s), integers (kind '0', in n) or booleans (kind
// 't', n 1 for true), calling set for each member in order. It reports
// false as soon as b is anything else or set returns false.
func scanFlat(b []byte, set func(name []byte, s []byte, n int64, kind byte) bool) bool {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return skipSpace(b, i+1) == len(b)
	}
	for {
		name, next, ok := plainString(b, i)
		if !ok {
			return false
		}
		i = skipSpace(b, next)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		i = skipSpace(b, i+1)
		if i >= len(b) {
			return false
		}
		switch c := b[i]; {
		case c == '"':
			s, next, ok := plainString(b, i)
			if !ok || !set(name, s, 0, '"') {
				return false
			}
			i = next
		case c == 't' || c == 'f':
			word, n := "false", int64(0)
			if c == 't' {
				word, n = "true", 1
			}
			if len(b)-i < len(word) || string(b[i:i+len(word)]) != word || !set(name, nil, n, 't') {
				return false
			}
			i += len(word)
		case c == '-' || '0' <= c && c <= '9':
			j := i + 1
			for j < len(b) && '0' <= b[j] && b[j] <= '9' {
				j++
			}
			// JSON allows no leading zeros; a fraction, an exponent or more
			// than 18 digits (which might not fit) go to encoding/json.
			digits := b[i:j]
			if c == '-' {
				digits = digits[1:]
			}
			if len(digits) == 0 || len(digits) > 18 || len(digits) > 1 && digits[0] == '0' ||
				j < len(b) && (b[j] == '.' || b[j] == 'e' || b[j] == 'E') {
				return false
			}
			var n int64
			for _, d := range digits {
				n = 10*n + int64(d-'0')
			}
			if c == '-' {
				n = -n
			}
			if !set(name, nil, n, '0') {
				return false
			}
			i = j
		default:
			return false
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return skipSpace(b, i+1) == len(b)
		default:
			return false
		}
	}
}

// plainString reads the JSON string at b[i]: its bytes, and the index after
// it. It reports false for anything but a string of valid UTF-8 without
// escapes or control characters.
func plainString(b []byte, i int) (s []byte, next int, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			s = b[i+1 : j]
			return s, j + 1, utf8.Valid(s)
		case c == '\\' || c < ' ':
			return nil, 0, false
		}
	}
	return nil, 0, false
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}
