package main

import (
	"context"
	"errors"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/shaper-dev/shaper/shaper/client"
)

// outcome classifies the answer to one submission.
type outcome int

const (
	outQueued    outcome = iota // 202, or NATS status "queued"
	outRejected                 // 429 without deferral, or NATS "rejected"
	outDeferred                 // 429 with deferred: true, or NATS "deferred"
	outClient                   // any other 4xx
	outServer                   // 5xx
	outError                    // NATS status "error"
	outOther                    // an unexpected status (1xx, 2xx other than 202, 3xx, unknown NATS status)
	outTransport                // no answer: connection, timeout, no responders
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"queued", "rejected", "deferred", "4xx", "5xx", "error", "other", "transport"}

func (o outcome) String() string { return outcomeNames[o] }

// submitter submits one job. detail names the raw answer (an HTTP status
// code, a NATS status or error code) for the summary; err is set for every
// outcome but queued, rejected and deferred.
type submitter interface {
	submit(ctx context.Context, key, idempotencyKey string, payload []byte) (o outcome, detail string, err error)
}

var (
	_ submitter = (*httpSubmitter)(nil)
	_ submitter = (*natsSubmitter)(nil)
)

// httpSubmitter posts jobs to the shaper's HTTP API.
type httpSubmitter struct {
	c      *client.Client
	policy string
}

func (h *httpSubmitter) submit(ctx context.Context, key, idem string, payload []byte) (outcome, string, error) {
	var res client.Result
	var err error
	if idem != "" {
		res, err = h.c.Submit(ctx, h.policy, key, payload, client.WithIdempotencyKey(idem))
	} else {
		res, err = h.c.Submit(ctx, h.policy, key, payload)
	}
	switch {
	case res.Outcome == client.OutcomeAccepted: // also with a 202 body it could not read
		return outQueued, "202", nil
	case err == nil && res.Outcome == client.OutcomeDeferred:
		return outDeferred, "429 deferred", nil
	case err == nil && res.Outcome == client.OutcomeLimited:
		return outRejected, "429 limited", nil // refused by the admission limit, not for a full queue
	case err == nil:
		return outRejected, "429", nil
	}
	var answer *client.Error
	if !errors.As(err, &answer) {
		return outTransport, "transport", err
	}
	detail := strconv.Itoa(answer.StatusCode)
	switch code := answer.StatusCode; {
	case code >= 400 && code < 500:
		return outClient, detail, err
	case code >= 500:
		return outServer, detail, err
	}
	return outOther, detail, err
}

// natsSubmitter requests shaper.submit.<policy>.<key token> with the raw key
// in the Shaper-Key header.
type natsSubmitter struct {
	n      *client.NATS
	policy string
}

func (n *natsSubmitter) submit(ctx context.Context, key, idem string, payload []byte) (outcome, string, error) {
	var res client.Result
	var err error
	if idem != "" {
		res, err = n.n.Submit(ctx, n.policy, key, payload, client.WithIdempotencyKey(idem))
	} else {
		res, err = n.n.Submit(ctx, n.policy, key, payload)
	}
	var answer *client.Error
	switch {
	case err == nil && res.Outcome == client.OutcomeAccepted:
		return outQueued, "queued", nil
	case err == nil && res.Outcome == client.OutcomeDeferred:
		return outDeferred, "deferred", nil
	case err == nil && res.Outcome == client.OutcomeLimited:
		return outRejected, "rejected limited", nil // status "rejected" by the admission limit, not for a full queue
	case err == nil:
		return outRejected, "rejected", nil
	case errors.As(err, &answer):
		return outError, "error " + strconv.Itoa(answer.StatusCode), err
	case errors.Is(err, client.ErrBadAnswer):
		return outOther, "bad reply", err
	case errors.Is(err, nats.ErrNoResponders):
		return outTransport, "no responders", err
	}
	return outTransport, "transport", err
}
