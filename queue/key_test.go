package queue

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestEncodeKey(t *testing.T) {
	tests := []struct {
		key, want string
	}{
		{"abc", "abc"},
		{"A-b_9", "A-b_9"},
		{"a.b", "~YS5i"},
		{"*", "~Kg"},
		{">", "~Pg"},
		{"~x", "~fng"},
		{"with space", "~d2l0aCBzcGFjZQ"},
		{"$SYS", "~JFNZUw"},
	}
	for _, tt := range tests {
		got, err := EncodeKey(tt.key)
		if err != nil || got != tt.want {
			t.Errorf("EncodeKey(%q) = %q, %v, want %q", tt.key, got, err, tt.want)
		}
		back, err := DecodeKey(got)
		if err != nil || back != tt.key {
			t.Errorf("DecodeKey(%q) = %q, %v, want %q", got, back, err, tt.key)
		}
	}
}

func TestEncodeKeyRejects(t *testing.T) {
	for _, key := range []string{"", strings.Repeat("k", MaxKeyLen+1), "\xff\xfe", strings.Repeat("x", 10<<10)} {
		if got, err := EncodeKey(key); !errors.Is(err, ErrBadKey) {
			t.Errorf("EncodeKey(%.20q…) = %q, %v, want ErrBadKey", key, got, err)
		}
	}
	if _, err := EncodeKey(strings.Repeat("ü", MaxKeyLen/2)); err != nil {
		t.Errorf("EncodeKey(256-byte key) = %v, want ok", err)
	}
}

func TestDecodeKeyRejects(t *testing.T) {
	for _, tok := range []string{"", "~", "~YS5i=", "~!!", "a.b", "~YWJj" /* "abc": plain keys are never encoded */, "a b"} {
		if got, err := DecodeKey(tok); err == nil {
			t.Errorf("DecodeKey(%q) = %q, want error", tok, got)
		}
	}
}

// checkToken fails t when token could change the shape of a subject.
func checkToken(t *testing.T, key, token string) {
	t.Helper()
	if token == "" || strings.ContainsAny(token, ".*> \t\r\n") || strings.HasPrefix(token, "$") {
		t.Fatalf("EncodeKey(%q) = %q: not a single safe subject token", key, token)
	}
}

func FuzzEncodeKey(f *testing.F) {
	for _, s := range []string{"a", "a.b", "*", ">", "a.>", "with space", "ключ", "$SYS", "~YQ", "_-", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		token, err := EncodeKey(key)
		if err != nil {
			if utf8.ValidString(key) && key != "" && len(key) <= MaxKeyLen {
				t.Fatalf("EncodeKey(%q) = %v for an acceptable key", key, err)
			}
			return
		}
		checkToken(t, key, token)
		back, err := DecodeKey(token)
		if err != nil || back != key {
			t.Fatalf("DecodeKey(EncodeKey(%q)) = %q, %v", key, back, err)
		}
	})
}

// FuzzDecodeKey checks the other direction: any token that decodes
// re-encodes to itself, so no two tokens name one key.
func FuzzDecodeKey(f *testing.F) {
	for _, s := range []string{"a", "~YS5i", "~Kg", "~", "~~", "~YWJj"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, token string) {
		key, err := DecodeKey(token)
		if err != nil {
			return
		}
		again, err := EncodeKey(key)
		if err != nil || again != token {
			t.Fatalf("EncodeKey(DecodeKey(%q)=%q) = %q, %v", token, key, again, err)
		}
	})
}
