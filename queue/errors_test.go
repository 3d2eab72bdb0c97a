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

// StorageFull tells JetStream's refusals for want of storage, of any
// request (a key-value bucket's renewal too), from other failures: the
// shaper's /readyz then says the storage is full, not that a quorum may be
// lost (a tour's single server with a full store was told to check that
// most of its cluster's servers were up).
func TestStorageFull(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&jetstream.APIError{Code: 503, ErrorCode: 10023, Description: "insufficient resources"}, true},
		{fmt.Errorf("renewal: %w", &jetstream.APIError{Code: 400, ErrorCode: 10002, Description: "resource limits exceeded for account"}), true},
		{fmt.Errorf("put: nats: API error: code=500 err_code=10023 description=insufficient resources"), true},
		{queue.ErrStorageFull, true},
		{&jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "jetstream temporarily unavailable"}, false},
		{context.DeadlineExceeded, false},
		{nil, false},
	} {
		if got := queue.StorageFull(tc.err); got != tc.want {
			t.Errorf("StorageFull(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
