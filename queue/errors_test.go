package queue_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/queue"
)

// An Admit whose answer never came may have stored the job (the 503 then
// says to submit it again under the same Idempotency-Key); one refused
// before it reached a stream did not.
func TestMaybeStored(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{context.DeadlineExceeded, true},
		{nats.ErrTimeout, true},
		{jetstream.ErrNoStreamResponse, true},
		{fmt.Errorf("queue: admit: %w", nats.ErrConnectionClosed), true},
		{nats.ErrNoResponders, false},
		{jetstream.ErrStreamNotFound, false},
		{queue.ErrFull, false},
		{errors.New("other"), false},
	} {
		if got := queue.MaybeStored(tc.err); got != tc.want {
			t.Errorf("MaybeStored(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
