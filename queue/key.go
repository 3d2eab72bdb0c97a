package queue

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxKeyLen is the longest key, in bytes, that a queue accepts.
const MaxKeyLen = 256

// ErrBadKey is returned for a key that is empty, longer than MaxKeyLen bytes,
// or not valid UTF-8, and for a subject token that no key encodes to.
var ErrBadKey = errors.New("bad key")

// encodedPrefix starts every token of a key outside [A-Za-z0-9_-]. It is not
// in that set, so an encoded token can never equal a plain key.
const encodedPrefix = "~"

var keyEncoding = base64.RawURLEncoding // alphabet [A-Za-z0-9_-]: subject-safe

// CheckKey reports whether key is acceptable: non-empty, valid UTF-8, at most
// MaxKeyLen bytes. The error wraps ErrBadKey.
func CheckKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty", ErrBadKey)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: %d bytes, at most %d", ErrBadKey, len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: not valid UTF-8", ErrBadKey)
	}
	return nil
}

// EncodeKey maps key to exactly one NATS subject token. Keys made only of
// [A-Za-z0-9_-] are their own token; any other key becomes "~" followed by
// the unpadded base64url of its bytes. The mapping is injective, and no token
// contains '.', '*', '>', white space or a leading '$', so no key can add a
// subject token or a wildcard.
func EncodeKey(key string) (string, error) {
	if err := CheckKey(key); err != nil {
		return "", err
	}
	if plain(key) {
		return key, nil
	}
	return encodedPrefix + keyEncoding.EncodeToString([]byte(key)), nil
}

// DecodeKey is the inverse of EncodeKey.
func DecodeKey(token string) (string, error) {
	if rest, ok := strings.CutPrefix(token, encodedPrefix); ok {
		b, err := keyEncoding.DecodeString(rest)
		if err != nil {
			return "", fmt.Errorf("%w: token %q: %v", ErrBadKey, token, err)
		}
		key := string(b)
		// Reject tokens EncodeKey would never produce, keeping the mapping a bijection.
		if err := CheckKey(key); err != nil {
			return "", err
		}
		if plain(key) || keyEncoding.EncodeToString(b) != rest {
			return "", fmt.Errorf("%w: token %q is not canonical", ErrBadKey, token)
		}
		return key, nil
	}
	if err := CheckKey(token); err != nil {
		return "", err
	}
	if !plain(token) {
		return "", fmt.Errorf("%w: token %q: a token is a key of [A-Za-z0-9_-] as it is, or %s and the key's unpadded base64url (EncodeKey)", ErrBadKey, token, encodedPrefix)
	}
	return token, nil
}

func plain(key string) bool {
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
