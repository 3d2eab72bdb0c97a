package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

var (
	// ErrFull is returned by Admit when the key's queue holds its maximum
	// number of jobs. It maps to HTTP 429.
	ErrFull = errors.New("queue full")
	// ErrStreamFull is returned when a stream-wide limit (bytes or messages
	// over all keys) refuses the job. It maps to HTTP 503: the key has room,
	// the backend does not.
	ErrStreamFull = errors.New("queue stream full")
	// ErrUnavailable is returned when JetStream cannot be reached or does not
	// answer in time. It maps to HTTP 503.
	ErrUnavailable = errors.New("queue unavailable")
	// ErrStorageFull is returned when JetStream has no storage left to
	// store the job in: the server's (max_file_store, max_memory_store) or
	// the account's limit is reached, "insufficient resources". No stream
	// of the server or account takes a message until removals free room
	// or JetStream gets more. It is an ErrUnavailable too, and maps to
	// HTTP 503.
	ErrStorageFull = fmt.Errorf("jetstream storage full: %w", ErrUnavailable)
	// ErrBadID is returned by Admit for a job whose ID is not one the
	// shaper can make (ValidJobID): read back, it would be undecodable.
	ErrBadID = errors.New("bad job id")
	// ErrTooLarge is returned for a payload over the configured maximum.
	ErrTooLarge = errors.New("payload too large")
	// ErrEmpty is returned by Next when the key has no job at or after the
	// sequence asked for.
	ErrEmpty = errors.New("queue empty")
)

// JetStream's err_codes for a store refusing a message: a stream's own
// limit (JSStreamStoreFailedF; the description says which), and no room
// left on the server (JSInsufficientResourcesErr) or in the account
// (JSAccountResourcesExceededErr).
const (
	codeStoreFailed           = 10077
	codeInsufficientResources = 10023
	codeAccountResources      = 10002
)

// StorageFull reports whether err, of any JetStream request (a key-value
// bucket's too, which classify does not see), is JetStream refusing it
// for want of storage: no room left on the server or in the account.
func StorageFull(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode == codeInsufficientResources || apiErr.ErrorCode == codeAccountResources
	}
	return errors.Is(err, ErrStorageFull) || err != nil && strings.Contains(err.Error(), "insufficient resources")
}

// classify maps a JetStream or NATS error onto the package's sentinels,
// keeping the original in the chain.
func classify(op string, err error) error {
	if err == nil {
		return nil
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		if apiErr.ErrorCode == codeStoreFailed {
			if strings.Contains(apiErr.Description, "per subject") {
				return &opError{op, ErrFull, err}
			}
			if strings.Contains(apiErr.Description, "too large") {
				return &opError{op, ErrTooLarge, err}
			}
			return &opError{op, ErrStreamFull, err}
		}
		if apiErr.ErrorCode == codeInsufficientResources || apiErr.ErrorCode == codeAccountResources {
			return &opError{op, ErrStorageFull, err}
		}
		if apiErr.Code == 503 {
			return &opError{op, ErrUnavailable, err}
		}
		return &opError{op, nil, err}
	}
	switch {
	case errors.Is(err, nats.ErrMaxPayload):
		return &opError{op, ErrTooLarge, err}
	case errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, nats.ErrTimeout),
		errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, jetstream.ErrNoStreamResponse),
		errors.Is(err, jetstream.ErrAsyncPublishTimeout),
		errors.Is(err, jetstream.ErrTooManyStalledMsgs),
		errors.Is(err, nats.ErrConnectionClosed),
		errors.Is(err, nats.ErrConnectionDraining),
		errors.Is(err, nats.ErrConnectionReconnecting),
		errors.Is(err, nats.ErrDisconnected),
		errors.Is(err, jetstream.ErrStreamNotFound):
		return &opError{op, ErrUnavailable, err}
	}
	return &opError{op, nil, err}
}

// MaybeStored reports whether err, an Admit's, leaves it unknown whether
// the job was stored: the request reached JetStream, or may have, and its
// answer did not come back (a timeout, a connection lost meanwhile).
func MaybeStored(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, jetstream.ErrAsyncPublishTimeout) ||
		errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrDisconnected)
}

// opError carries an operation name, an optional sentinel and the cause;
// errors.Is matches both the sentinel and anything in the cause's chain.
type opError struct {
	op       string
	sentinel error
	cause    error
}

func (e *opError) Error() string {
	if e.sentinel != nil {
		return e.op + ": " + e.sentinel.Error() + ": " + e.cause.Error()
	}
	return e.op + ": " + e.cause.Error()
}

func (e *opError) Unwrap() []error {
	if e.sentinel != nil {
		return []error{e.sentinel, e.cause}
	}
	return []error{e.cause}
}
