package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// The values of the headers every answer sets, shared: a header's values
// are copied when the answer is written, never changed in place.
var (
	jsonType    = []string{"application/json"}
	problemType = []string{"application/problem+json"}
	nosniff     = []string{"nosniff"}
)

// AppendString appends s to b as a JSON string, escaped exactly as
// encoding/json escapes it (HTML's <, > and & too). ASCII, which a
// policy's name, a key, a job id and the shaper's messages almost always
// are, is escaped here without allocating; a string with other runes goes
// through json.Marshal.
func AppendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			q, _ := json.Marshal(s) // a string always marshals
			return append(b, q...)
		}
	}
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
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
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// WriteBody writes body, a JSON document, as a code answer of type
// application/json: what WriteJSON writes, for a body already encoded.
func WriteBody(w http.ResponseWriter, code int, body []byte) {
	w.Header()["Content-Type"] = jsonType
	w.WriteHeader(code)
	w.Write(body)
}

// appendJSON appends p to b as encoding/json would encode it, followed by
// a newline as json.Encoder writes one: the problem answer of every 429
// and error, without reflection.
func (p Problem) appendJSON(b []byte) []byte {
	b = append(b, `{"type":`...)
	b = AppendString(b, p.Type)
	b = append(b, `,"title":`...)
	b = AppendString(b, p.Title)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(p.Status), 10)
	for _, f := range [...]struct{ name, v string }{{`,"detail":`, p.Detail}, {`,"policy":`, p.Policy}, {`,"key":`, p.Key}} {
		if f.v != "" {
			b = append(b, f.name...)
			b = AppendString(b, f.v)
		}
	}
	if p.RetryAfterMs != nil {
		b = append(b, `,"retry_after_ms":`...)
		b = strconv.AppendInt(b, *p.RetryAfterMs, 10)
	}
	if p.ID != "" {
		b = append(b, `,"id":`...)
		b = AppendString(b, p.ID)
	}
	if p.Deferred != nil {
		b = append(b, `,"deferred":`...)
		b = strconv.AppendBool(b, *p.Deferred)
	}
	return append(b, "}\n"...)
}
