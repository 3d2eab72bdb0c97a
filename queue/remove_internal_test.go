package queue

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestRemoveAnswer reads every kind of answer JetStream gives a removal
// other than the usual success, which Remove matches by its ending.
func TestRemoveAnswer(t *testing.T) {
	for _, c := range []struct {
		answer      string
		ok, unavail bool
	}{
		{`{"success":true,"type":"io.nats.jetstream.api.v1.stream_msg_delete_response"}`, true, false},
		{`{"type":"x","error":{"code":404,"err_code":10037,"description":"no message found"}}`, true, false},
		{`{"type":"x","error":{"code":404,"err_code":10059,"description":"stream not found"}}`, true, false},
		{`{"type":"x","error":{"code":500,"err_code":10057,"description":"no message found"}}`, true, false},
		{`{"type":"x","error":{"code":503,"err_code":10008,"description":"JetStream system temporarily unavailable"}}`, false, true},
		{`{"type":"x","error":{"code":500,"err_code":10057,"description":"disk on fire"}}`, false, false},
		{`{"type":"x"}`, false, false},
		{`not json`, false, false},
	} {
		err := removeAnswer([]byte(c.answer))
		if (err == nil) != c.ok {
			t.Errorf("%s: %v, want ok %v", c.answer, err, c.ok)
		}
		if errors.Is(err, ErrUnavailable) != c.unavail {
			t.Errorf("%s: %v, want unavailable %v", c.answer, err, c.unavail)
		}
	}
	if err := removeAnswer([]byte(`{"type":"x"}`)); !errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful) {
		t.Errorf("an answer of neither success nor error = %v, want ErrMsgDeleteUnsuccessful", err)
	}
	var apiErr *jetstream.APIError
	if err := removeAnswer([]byte(`{"error":{"code":500,"err_code":10057,"description":"disk on fire"}}`)); !errors.As(err, &apiErr) || apiErr.ErrorCode != 10057 {
		t.Errorf("JetStream's error = %v, want its APIError kept", err)
	}
}

// TestDeleteSubject: Remove's subject follows the API prefix or domain of
// the queue's JetStream, as the jetstream package's own requests do.
func TestDeleteSubject(t *testing.T) {
	nc := new(nats.Conn) // no request is made: the subject is all that is read
	plain, _ := jetstream.New(nc)
	domain, _ := jetstream.NewWithDomain(nc, "hub")
	prefixed, _ := jetstream.NewWithAPIPrefix(nc, "$JS.other.API")
	dotted, _ := jetstream.NewWithAPIPrefix(nc, "$JS.other.API.")
	for js, want := range map[jetstream.JetStream]string{
		plain:    "$JS.API.STREAM.MSG.DELETE.S",
		domain:   "$JS.hub.API.STREAM.MSG.DELETE.S",
		prefixed: "$JS.other.API.STREAM.MSG.DELETE.S",
		dotted:   "$JS.other.API.STREAM.MSG.DELETE.S",
	} {
		if got := deleteSubject(js, "S"); got != want {
			t.Errorf("deleteSubject = %q, want %q", got, want)
		}
	}
}
