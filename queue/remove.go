package queue

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// JetStream's error codes of a job or a stream that is not there.
const (
	codeNoMessageFound = 10037
	codeStreamNotFound = 10059
)

// removed ends JetStream's answer to a removal that succeeded:
// {"type":"io.nats.jetstream.api.v1.stream_msg_delete_response","success":true}.
var removed = []byte(`"success":true}`)

// deleteSubject is the JetStream API subject that removes one message of
// stream, under js's API prefix or domain as the jetstream package makes it.
func deleteSubject(js jetstream.JetStream, stream string) string {
	o := js.Options()
	prefix := jetstream.DefaultAPIPrefix
	switch {
	case o.Domain != "":
		prefix = "$JS." + o.Domain + ".API."
	case o.APIPrefix != "":
		prefix = strings.TrimSuffix(o.APIPrefix, ".") + "."
	}
	return prefix + "STREAM.MSG.DELETE." + stream
}

// Remove deletes the job stored at seq, freeing its key's slot. Removing a
// job that is already gone, or of a stream that is gone, is not an error.
//
// It is the drainer's one JetStream request per delivery, so it writes the
// request and reads the answer itself: the jetstream package's DeleteMsg
// formats the subject, marshals a struct and unmarshals the answer each
// time (14 of the 117 allocations a removal made, server and client
// together), and wraps JetStream's error in a string, which hid a 503
// from ErrUnavailable.
func (q *Queue) Remove(ctx context.Context, seq uint64) error {
	ctx, cancel := context.WithTimeout(ctx, q.cfg.Timeout)
	defer cancel()
	var b [48]byte
	req := strconv.AppendUint(append(b[:0], `{"seq":`...), seq, 10)
	req = append(req, `,"no_erase":true}`...)
	m, err := q.js.Conn().RequestWithContext(ctx, q.removeSubject, req)
	if err != nil {
		return classify("queue: remove", err)
	}
	if bytes.HasSuffix(m.Data, removed) {
		return nil
	}
	return removeAnswer(m.Data)
}

// removeAnswer reads an answer to a removal other than the usual success.
func removeAnswer(data []byte) error {
	var resp struct {
		Success bool                `json:"success"`
		Error   *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(data, &resp); err != nil {
		return classify("queue: remove", fmt.Errorf("JetStream's answer %.200q: %w", data, err))
	}
	switch e := resp.Error; {
	case e == nil && resp.Success:
		return nil
	case e == nil:
		return classify("queue: remove", fmt.Errorf("%w: JetStream answered %.200q", jetstream.ErrMsgDeleteUnsuccessful, data))
	case e.ErrorCode == codeNoMessageFound || e.ErrorCode == codeStreamNotFound,
		strings.Contains(e.Description, "not found"), strings.Contains(e.Description, "no message found"):
		return nil
	}
	return classify("queue: remove", resp.Error)
}
