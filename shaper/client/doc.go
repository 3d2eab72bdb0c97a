// Package client talks to shaper: it holds the types of the HTTP and NATS
// contract (the JSON of every answer, the subjects and headers) and
// submits jobs and reads and tunes a running shaper through them.
//
//	c, err := client.New("http://127.0.0.1:8080", client.Config{})
//	if err != nil { … }
//	res, err := c.Submit(ctx, "orders", "acme", payload,
//		client.WithIdempotencyKey(orderID), client.WithRetry(30*time.Second))
//	switch {
//	case err != nil:
//		// not taken: errors.Is(err, client.ErrUnknownPolicy), ErrBadRequest,
//		// ErrTooLarge, ErrUnavailable (with errors.As: *client.Error's
//		// StatusCode, Problem and RetryAfter), or a transport error
//	case res.Outcome == client.OutcomeAccepted:
//		// stored: res.ID, res.Queued, res.ETA
//	case res.Outcome == client.OutcomeDeferred:
//		// kept: it runs in about res.RetryAfter; do not submit it again
//	default:
//		// OutcomeRejected (the key's queue is full) or OutcomeLimited (the
//		// admission limit): not kept, even after 30 s of retries; come back
//		// after res.RetryAfter
//	}
//
// # Submitting
//
// Client.Submit posts to /v1/jobs/{policy}/{key}; NATS.Submit sends the
// same job as a NATS request to shaper.submit.<policy>.<key token>. Both
// answer with a Result for the answers a producer acts on (202 and 429:
// accepted, rejected because the key's queue is full, deferred, limited by
// the policy's admission limit) and an error for everything else. A key
// is any UTF-8 string of up to 256 bytes: the client escapes it for the
// URL ("a/b", "..", "%" and spaces arrive as they are) or encodes it into
// one subject token (queue.EncodeKey), so no key can reach another route
// or subject.
//
// WithRetry waits a refusal's RetryAfter and submits again, within a bound
// (after repeated refusals with a growing random spread, so that many
// producers refused together spread their retries); it never resubmits a
// deferred job, which the shaper keeps. It also submits again after a
// failure that leaves the job's fate unknown (a 503, no shaper answering,
// a timeout), under an idempotency key it gives the job when none was
// given, so that a job is stored once however often it is sent; other
// errors are returned at once.
//
// # The direct lane
//
// Direct publishes a policy's jobs straight into its queue stream with
// JetStream's async publish and its per-key limit, for producers that need
// raw speed, where the shapers say that skipping their admission changes
// no outcome (no admit: limit, no overflow: defer): NewDirect,
// Direct.Publish and Ack.Result, or Direct.Submit. A closed lane is
// ErrLaneClosed; submit through the shaper then. See docs/api.md, "The
// direct lane".
//
// # Operating
//
// Client also reads a job's status (Job), the policies with their live
// figures (Policies, Policy), tunes a policy on every shaper of a cluster
// (SetPolicy, ResetPolicy), lists, shows, replays and purges dead letters
// (DeadLetters, DeadLetterPage, AllDeadLetters, DeadLetter, ReplayDead,
// PurgeDead), lists deferred jobs (DeferredJobs, AllDeferredJobs), and
// asks whether the shaper is alive (Health) and accepts jobs (Ready).
// Listings come a page at a time, each naming the next (Next, passed back
// as After); the All… methods are iterators that follow the pages. With Config.Token it
// sends a bearer token, which admin endpoints may require.
//
// # Errors
//
// Any answer that is not a success is an *Error carrying the status code
// and the answer's RFC 9457 problem; errors.Is matches it against
// ErrNotFound, ErrUnknownPolicy, ErrBadRequest, ErrTooLarge,
// ErrUnauthorized and ErrUnavailable. An answer that is not the contract's
// JSON is ErrBadAnswer. Transport errors come back wrapped, so that
// errors.Is finds context.DeadlineExceeded or nats.ErrNoResponders.
//
// # The contract
//
// Accepted, Problem, Reply, Job, Policy, PolicyChange, DeadLetter,
// DeadPage, DeadReport, DeferredJob and DeferredPage are the JSON of the
// API, field for field; ReplyStatus and
// JobStatus are its fixed sets of strings, as types that marshal to those
// strings. The header and subject names are constants (HeaderKey, …,
// DefaultSubmitSubject); the delivery headers are package queue's.
//
// Client, NATS and Direct are safe for concurrent use. This package does not
// import package shaper, so the server can use its types.
//
// # From another module
//
// The module is github.com/shaper-dev/shaper. Where no module proxy serves
// it (it is not published yet), require it from a clone of the repository:
//
//	go mod edit -require=github.com/shaper-dev/shaper@v0.0.0 -replace=github.com/shaper-dev/shaper=../shaper
//	go mod tidy
//
// where ../shaper is the clone's path, relative to your go.mod.
package client
