package queue

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

func TestParsePubAck(t *testing.T) {
	for _, c := range []struct {
		in   string
		seq  uint64
		dup  bool
		code jetstream.ErrorCode // of the error, 0 for none
		bad  bool                // ErrInvalidJSAck
	}{
		{in: `{"stream":"SHAPER_Q_orders","seq":42}`, seq: 42},
		{in: `{"stream":"S","seq":7,"duplicate": true}`, seq: 7, dup: true},
		{in: `{"stream":"S","domain":"hub","seq":18446744073709551615,"duplicate":true}`, seq: 18446744073709551615, dup: true},
		{in: `{"stream":"S","seq":9,"duplicate":false}`, seq: 9},
		{in: `{"error":{"code":503,"err_code":10077,"description":"maximum messages per subject exceeded"}}`, code: 10077},
		{in: `{"error":{"code":400,"err_code":10060,"description":"expected stream does not match"}}`, code: 10060},
		{in: `{"stream":"S"}`, bad: true},
		{in: `{"stream":"S","seq":0}`, bad: true},
		{in: `{"stream":"S","seq":-1}`, bad: true},
		{in: `{"error":`, bad: true},
		{in: ``, bad: true},
	} {
		seq, dup, err := parsePubAck([]byte(c.in))
		var api *jetstream.APIError
		switch {
		case c.bad:
			if !errors.Is(err, jetstream.ErrInvalidJSAck) {
				t.Errorf("parsePubAck(%s) = %d, %v, %v; want ErrInvalidJSAck", c.in, seq, dup, err)
			}
		case c.code != 0:
			if !errors.As(err, &api) || api.ErrorCode != c.code {
				t.Errorf("parsePubAck(%s) = %v, want an APIError %d", c.in, err, c.code)
			}
		case err != nil || seq != c.seq || dup != c.dup:
			t.Errorf("parsePubAck(%s) = %d, %v, %v; want %d, %v", c.in, seq, dup, err, c.seq, c.dup)
		}
	}
	// A store refusal still classifies as a full key.
	_, _, err := parsePubAck([]byte(`{"error":{"code":503,"err_code":10077,"description":"maximum messages per subject exceeded"}}`))
	if err := classify("admit", err); !errors.Is(err, ErrFull) {
		t.Errorf("classify(per-subject refusal) = %v, want ErrFull", err)
	}
	// A server or account out of storage is ErrStorageFull, and still
	// unavailable; a stream's own byte limit is not.
	for _, c := range []struct {
		ack         string
		storageFull bool
	}{
		{`{"error":{"code":503,"err_code":10023,"description":"insufficient resources"}}`, true},
		{`{"error":{"code":400,"err_code":10002,"description":"resource limits exceeded for account"}}`, true},
		{`{"error":{"code":503,"err_code":10077,"description":"maximum bytes exceeded"}}`, false},
	} {
		_, _, err := parsePubAck([]byte(c.ack))
		err = classify("admit", err)
		if errors.Is(err, ErrStorageFull) != c.storageFull || c.storageFull && !errors.Is(err, ErrUnavailable) {
			t.Errorf("classify(%s) = %v: ErrStorageFull %v, ErrUnavailable %v; want ErrStorageFull %v, and unavailable with it",
				c.ack, err, errors.Is(err, ErrStorageFull), errors.Is(err, ErrUnavailable), c.storageFull)
		}
	}
}

// FuzzParsePubAck: whatever a server (or something posing as one) answers,
// parsePubAck returns a sequence or an error, never both, and never panics.
func FuzzParsePubAck(f *testing.F) {
	for _, s := range []string{`{"stream":"S","seq":42}`, `{"stream":"S","seq":7,"duplicate": true}`, `{"error":{"code":503,"err_code":10077,"description":"x"}}`, `"seq":`, `{"error"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		seq, dup, err := parsePubAck(data)
		if err != nil && (seq != 0 || dup) {
			t.Errorf("parsePubAck(%q) = %d, %v with error %v", data, seq, dup, err)
		}
		if err == nil && seq == 0 {
			t.Errorf("parsePubAck(%q) = sequence 0 without an error", data)
		}
	})
}
