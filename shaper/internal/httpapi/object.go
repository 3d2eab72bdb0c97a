package httpapi

import (
	"net/http"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// Object writes one JSON object, its members in the order added, byte for
// byte as encoding/json's Encoder writes a struct of them (HTML-safe
// strings, a newline after the object): the answers written on every
// submission (202 and 429) are made this way, without reflection, while
// their shape stays the one their structs' tags document. Names are the
// caller's constants and are not escaped. The zero Object is empty; Write
// sends it and gives its buffer back to be used again.
type Object struct {
	b []byte
}

// objects are the buffers of written Objects (one answer's worth each).
var objects = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

func (o *Object) member(name string) {
	if o.b == nil {
		o.b = (*objects.Get().(*[]byte))[:0]
	}
	if len(o.b) == 0 {
		o.b = append(o.b, '{')
	} else {
		o.b = append(o.b, ',')
	}
	o.b = append(append(append(o.b, '"'), name...), '"', ':')
}

// String adds the member name with the string v.
func (o *Object) String(name, v string) {
	o.member(name)
	o.b = appendString(o.b, v)
}

// OmitEmpty adds the member name with the string v unless v is empty
// (a field tagged omitempty).
func (o *Object) OmitEmpty(name, v string) {
	if v != "" {
		o.String(name, v)
	}
}

// Int adds the member name with the number v.
func (o *Object) Int(name string, v int64) {
	o.member(name)
	o.b = strconv.AppendInt(o.b, v, 10)
}

// Bool adds the member name with v.
func (o *Object) Bool(name string, v bool) {
	o.member(name)
	o.b = strconv.AppendBool(o.b, v)
}

// Time adds the member name with t as encoding/json writes a time.Time
// (RFC 3339 with nanoseconds; null for a year it cannot write, which
// encoding/json refuses).
func (o *Object) Time(name string, t time.Time) {
	o.member(name)
	if j, err := t.MarshalJSON(); err == nil {
		o.b = append(o.b, j...)
	} else {
		o.b = append(o.b, "null"...)
	}
}

// Bytes returns the object written so far, closed, with encoding/json's
// trailing newline.
func (o *Object) Bytes() []byte {
	if len(o.b) == 0 {
		o.b = append(o.b, '{')
	}
	return append(o.b, '}', '\n')
}

// Write sends the object as the body of w's answer (its headers written
// already) and gives its buffer back.
func (o *Object) Write(w http.ResponseWriter) {
	b := o.Bytes()
	w.Write(b)
	if cap(b) <= 4<<10 { // a rare long detail's buffer is not kept
		b = b[:0]
		objects.Put(&b)
	}
	o.b = nil
}

// appendString appends s as a JSON string escaped as encoding/json's
// Encoder escapes it: ", \ and control characters, <, > and & as \u00XX
// (HTML-safe), invalid UTF-8 as \ufffd, U+2028 and U+2029 as \u2028 and
// \u2029. (FuzzObject holds it to encoding/json's output.)
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
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
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(append(b, s[start:i]...), `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(append(b, s[start:i]...), '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	return append(append(b, s[start:]...), '"')
}
