package client

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/shaper-dev/shaper/drain/adapt"
	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/queue"
)

// The names of the NATS contract.
const (
	// DefaultSubmitSubject is the root of the NATS ingress: a job for key k of
	// policy p is a request to <root>.<p>.<token of k> (see queue.EncodeKey).
	DefaultSubmitSubject = "shaper.submit"

	// HeaderJobID, HeaderPolicy, HeaderKey, HeaderEnqueuedAt, HeaderAttempt
	// and HeaderTrace are the headers of every delivery. HeaderKey may also
	// carry the raw key of a NATS submission, and HeaderTrace the producer's
	// W3C trace context (passed on as is).
	HeaderJobID      = queue.HeaderJobID
	HeaderPolicy     = queue.HeaderPolicy
	HeaderKey        = queue.HeaderKey
	HeaderEnqueuedAt = queue.HeaderEnqueuedAt
	HeaderAttempt    = queue.HeaderAttempt
	HeaderTrace      = queue.HeaderTrace
	// HeaderReplayOf is on the deliveries of a replayed dead letter (a new
	// job, of a new id): the id of the dead job it replays, for a consumer
	// that keeps the ids it has done to tell work it did already.
	HeaderReplayOf = queue.HeaderReplayOf

	// HeaderIdempotencyKey makes a submission idempotent: a retry within the
	// shaper's two-minute duplicate window is stored once and answered with
	// the first one's id and Duplicate set. It is an HTTP header and a NATS
	// header alike.
	HeaderIdempotencyKey = "Idempotency-Key"
)

// Accepted is the body of the 202 answer to POST /v1/jobs/{policy}/{key}:
// the job is stored in its key's queue.
type Accepted struct {
	// ID names the job (GET /v1/jobs/{id}).
	ID string `json:"id"`
	// Policy and Key are what the job was submitted to.
	Policy string `json:"policy"`
	Key    string `json:"key"`
	// Queued is how many jobs the key holds with this one.
	Queued int64 `json:"queued"`
	// ETAMs is when the job is expected to be delivered, in milliseconds
	// from now.
	ETAMs int64 `json:"eta_ms"`
	// Duplicate says the submission repeated an earlier one's
	// Idempotency-Key within the duplicate window: nothing new was stored,
	// and ID is the first one's.
	Duplicate bool `json:"duplicate,omitempty"`
	// WaitingForConsumer is since when the deliveries of the drainer of
	// the job's key have found no consumer: its last delivery, of this key
	// or another of the policy, found nobody subscribed to its subject.
	// Absent while they find one. It speaks for the policy's deliver
	// subject (shaper.out.<policy>.>), not for one key's: a consumer
	// subscribed to some keys' subjects only leaves it set for those too.
	// ETAMs holds once one subscribes.
	WaitingForConsumer time.Time `json:"waiting_for_consumer_since,omitzero"`
}

// Problem is the RFC 9457 problem detail (application/problem+json) of
// every error answer of the HTTP API, and of every 429, with shaper's
// extension members.
type Problem struct {
	// Type is always "about:blank": the status code says what happened.
	Type string `json:"type"`
	// Title is the status code's text, Status the code.
	Title  string `json:"title"`
	Status int    `json:"status"`
	// Detail says what went wrong in words.
	Detail string `json:"detail,omitempty"`
	// Policy and Key are what the submission was for, when it got that far.
	Policy string `json:"policy,omitempty"`
	Key    string `json:"key,omitempty"`
	// RetryAfterMs is when to come back, in milliseconds: of a 429 without
	// deferral, the time until the key's next slot frees (or the admission
	// limit allows another job); of a deferred 429, when the kept job is
	// expected to run; of a 503, when to try again. Zero when not said.
	RetryAfterMs int64 `json:"retry_after_ms,omitempty"`
	// Deferred says the job was kept (a full key of an overflow: defer
	// policy): it runs later, do not submit it again. The shaper sends it
	// in 429 answers only.
	Deferred bool `json:"deferred"`
	// ID is the id of a deferred job.
	ID string `json:"id,omitempty"`
	// Duplicate says a deferred 429 answers a resubmission (the same
	// Idempotency-Key) of a job deferred before: nothing new was kept, and
	// ID is the first one's.
	Duplicate bool `json:"duplicate,omitempty"`
}

// MarshalJSON writes p as the shaper does: deferred only in a 429.
func (p Problem) MarshalJSON() ([]byte, error) {
	type plain Problem
	return json.Marshal(struct {
		plain
		Deferred *bool `json:"deferred,omitempty"`
	}{plain(p), deferredIf(p.Status == http.StatusTooManyRequests, p.Deferred)})
}

// deferredIf is deferred when it means something (on), else nil.
func deferredIf(on, deferred bool) *bool {
	if !on {
		return nil
	}
	return &deferred
}

// Reply is the answer to a NATS submission: what the HTTP API says in its
// 202 body or its problem, with Status and Code saying which.
type Reply struct {
	// Status is queued, rejected, deferred or error.
	Status ReplyStatus `json:"status"`
	// ID is the job's id when it was queued or deferred.
	ID     string `json:"id,omitempty"`
	Policy string `json:"policy,omitempty"`
	Key    string `json:"key,omitempty"`
	// Queued is how many jobs the key holds: with this one when queued, at
	// least the queue size when rejected because the key is full.
	Queued int64 `json:"queued"`
	// ETAMs is when a queued job is expected to be delivered, in
	// milliseconds from now.
	ETAMs int64 `json:"eta_ms"`
	// RetryAfterMs is as in Problem.
	RetryAfterMs int64 `json:"retry_after_ms,omitempty"`
	// Deferred is Status == ReplyDeferred; the shaper sends it with the
	// refusals only (rejected, deferred).
	Deferred bool `json:"deferred"`
	// Duplicate and WaitingForConsumer are as in Accepted.
	Duplicate          bool      `json:"duplicate,omitempty"`
	WaitingForConsumer time.Time `json:"waiting_for_consumer_since,omitzero"`
	// Code is the HTTP status code the same submission would have been
	// answered with (202, 429, 400, 404, 413, 503).
	Code int `json:"code"`
	// Error says what went wrong in words (the problem's detail).
	Error string `json:"error,omitempty"`
}

// MarshalJSON writes r as the shaper does: deferred only in a refusal.
func (r Reply) MarshalJSON() ([]byte, error) {
	type plain Reply
	return json.Marshal(struct {
		plain
		Deferred *bool `json:"deferred,omitempty"`
	}{plain(r), deferredIf(r.Status == ReplyRejected || r.Status == ReplyDeferred, r.Deferred)})
}

// Policy is a policy as it is live now (the file's, or a live override)
// with its figures, as GET /v1/policies and /v1/policies/{name} show it.
// The counters are the answering shaper's, since it started.
type Policy struct {
	policies.Policy
	// Keys is how many keys have jobs queued; Queued the jobs over all keys.
	Keys   int   `json:"keys"`
	Queued int64 `json:"queued"`
	// QueuedDraining is Queued in the partitions the answering shaper
	// drains: exact, where its count of the others' lags their removals by
	// up to 2 s; summed over the shapers, the policy's queued jobs.
	QueuedDraining int64 `json:"queued_draining"`
	// Admitted counts 202s; Duplicates the resubmissions answered from the
	// duplicate window.
	Admitted   uint64 `json:"admitted"`
	Duplicates uint64 `json:"duplicates"`
	// Rejected counts 429s of a full key, Unavailable 503s.
	Rejected    uint64 `json:"rejected"`
	Unavailable uint64 `json:"unavailable"`
	// Limited counts submissions refused by the admission limit;
	// ShadowLimited those a shadow limit would have refused;
	// LimiterErrors the decisions its backend (Redis) failed.
	Limited       uint64 `json:"limited"`
	ShadowLimited uint64 `json:"shadow_limited"`
	LimiterErrors uint64 `json:"limiter_errors"`
	// LimiterUnavailableSince is when the admission limit's backend began
	// failing the answering shaper's decisions, while it still does: the
	// policy then fails open (its local share of the limit) or closed
	// (every submission 503). Zero while it answers.
	LimiterUnavailableSince time.Time `json:"limiter_unavailable_since,omitzero"`
	// RestartPending lists the changes of the policy file, reloaded, that
	// the answering shaper applies only at a restart ("partitions 4 → 2",
	// a delivery target).
	RestartPending []string `json:"restart_pending,omitempty"`
	// Deferred counts deferred 429s; DeferredQueued is how many deferred
	// jobs wait for re-admission; Readmitted counts those put back into
	// their queue.
	Deferred       uint64 `json:"deferred"`
	DeferredQueued int64  `json:"deferred_queued"`
	Readmitted     uint64 `json:"readmitted"`
	// Dead is how many dead letters the policy has.
	Dead uint64 `json:"dead"`
	// Delivered counts deliveries, Failed failed delivery attempts.
	Delivered uint64 `json:"delivered"`
	Failed    uint64 `json:"failed"`
	// Retries counts the attempts that retried a failed job: the slots the
	// retry budget (Retry.Budget) gave. RetriesDeferred counts the slots in
	// which a due retry gave way to a fresh job because the budget was
	// spent; SteppedAside is how many failed jobs wait for a retry now while
	// their keys' fresh jobs go on.
	Retries         uint64 `json:"retries"`
	RetriesDeferred uint64 `json:"retries_deferred"`
	SteppedAside    int    `json:"stepped_aside"`
	// Override says a live override applies (the policy was tuned live);
	// Overridden lists the fields it sets or resets, by their path in the
	// policy file ("retry.attempts"; "admit" when it is off). The other
	// fields are the file's.
	Override   bool     `json:"override"`
	Overridden []string `json:"overridden,omitempty"`
	// DirectLane says producers may publish the policy's jobs straight
	// into its queue stream (Direct): its admission does nothing a store
	// does not. DirectLaneRefused says why not, when they may not.
	DirectLane        bool   `json:"direct_lane"`
	DirectLaneRefused string `json:"direct_lane_refused,omitempty"`
	// Draining says the answering shaper holds the policy's drain lease;
	// InFlight is how many of its deliveries are in progress.
	Draining bool `json:"draining"`
	InFlight int  `json:"in_flight"`
	// Partitions is how many partitions the policy is drained in;
	// DrainingPartitions are those the answering shaper drains, and
	// Drainers names the shaper holding each partition's lease ("" for
	// none), as the cluster's leases say.
	Partitions         int      `json:"partitions"`
	DrainingPartitions []int    `json:"draining_partitions"`
	Drainers           []string `json:"drainers,omitempty"`
	// DrainersUnrenewed gives, for a drainer that missed a renewal of its
	// lease, the milliseconds since it last renewed: a lost shaper stays
	// among the drainers until its lease ends.
	DrainersUnrenewed map[string]int64 `json:"drainers_unrenewed_ms,omitempty"`
	// PartitionsInUse is the number of partitions the other shapers drain
	// the policy in, when it is not the answering shaper's: that one
	// stands by, and Drainers are theirs.
	PartitionsInUse int `json:"partitions_in_use,omitempty"`
	// FileDiffersOn names the other shapers whose policy file sets the
	// policy otherwise than the answering shaper's.
	FileDiffersOn []string `json:"file_differs_on,omitempty"`
	// Adapting is what the policy's adaptive outflow (its adapt block)
	// does on the answering shaper now: the effective rate of an adaptive
	// total (per: policy), and those of the five deepest keys that adapt
	// (per: key), each with why ("latency 2.1× baseline").
	Adapting *adapt.Rates `json:"adapting,omitempty"`
	// WaitingForConsumer is since when the answering shaper's deliveries
	// of the policy have found no consumer (nobody subscribed to its
	// deliver subject); nil while they find one, or when it drains none
	// of the policy's partitions.
	WaitingForConsumer *time.Time `json:"waiting_for_consumer_since,omitempty"`
}

// PolicyChange is the body of PUT /v1/policies/{name}: a JSON merge patch
// (RFC 7396) of the policy, with explicit presence for every field. A
// field left out keeps its value (policies.Field's zero value), one set
// with policies.Value changes, and one set with policies.Null resets to
// the policy file's value (or the default when the file leaves it out). A
// block (Deliver, Retry, Admit) names only the fields it changes; admit
// off (policies.AdmitPatch{Off: true}) removes the admission limit and a
// Total of the zero Rate the cap. The change is merged into the policy's
// live override, applies on every shaper of the cluster and is kept until
// DELETE /v1/policies/{name}/override. Where jobs are delivered and the
// name cannot change. It is the type the policy file is read into, so it
// means what the file means.
type PolicyChange = policies.Patch

// DeadLetter is a dead-lettered job, as GET /v1/dead lists it and GET
// /v1/dead/{policy}/{seq} shows it (only the latter with the payload).
type DeadLetter struct {
	// Seq is the dead letter's sequence in its policy's dead-letter stream.
	Seq    uint64 `json:"seq"`
	Policy string `json:"policy"`
	Key    string `json:"key"`
	// ID is the job's id.
	ID string `json:"id"`
	// Reason is attempts, deadline, delivery or undecodable (a message in
	// the queue that is no job the shaper can have stored; History says why).
	Reason string `json:"reason"`
	// From is where the job died: "queue" or "deferred".
	From string `json:"from"`
	// At is when it was dead-lettered.
	At time.Time `json:"at"`
	// Attempts is how many attempts were made.
	Attempts int      `json:"attempts"`
	History  []string `json:"history"`
	// Size is the payload's size in bytes.
	Size int `json:"size"`
	// Payload is the payload when it is UTF-8 text, PayloadBinary when it
	// is not (shown only).
	Payload       *string `json:"payload,omitempty"`
	PayloadBinary []byte  `json:"payload_base64,omitempty"`
}

// Data returns the dead letter's payload, whichever way it came; nil when
// it came without one (as listed).
func (d *DeadLetter) Data() []byte {
	if d.Payload != nil {
		return []byte(*d.Payload)
	}
	return d.PayloadBinary
}

// DeadReport is the answer to POST /v1/dead/replay and DELETE /v1/dead:
// how many dead letters matched the filter and how many were replayed (kept
// by the normal admission path: 202 or deferred) or purged, and each one.
type DeadReport struct {
	Done    int          `json:"done"`
	Matched int          `json:"matched"`
	Results []DeadResult `json:"results"`
}

// DeadResult is what a replay or purge did with one dead letter.
type DeadResult struct {
	Seq    uint64 `json:"seq"`
	Policy string `json:"policy"`
	ID     string `json:"id"`
	// NewID is a replayed job's new id.
	NewID string `json:"new_id,omitempty"`
	// Done says the dead letter was replayed or purged (and removed).
	Done bool `json:"done"`
	// Why says, of one not done, why: the answer to its submission again
	// ("400: bad key: empty" of an undecodable one), or that it could not
	// be removed.
	Why string `json:"why,omitempty"`
}

// DeadFilter selects dead letters; its zero value selects every dead letter
// of every policy.
type DeadFilter struct {
	// Policy, Key and Reason (attempts, deadline, delivery or undecodable)
	// select when set.
	Policy string
	Key    string
	Reason string
	// Limit bounds how many are listed (a page: at most 1000), replayed or
	// purged; 0 means the shaper's default (100 listed, all replayed or
	// purged).
	Limit int
	// After is where a listing goes on: the Next of the page before ("",
	// the first page). Replay and purge ignore it.
	After string
}

// DefaultJobSubject is the root of the job status subjects: a request to
// <root>.<id> is answered by a shaper with the job (Job's JSON, as GET
// /v1/jobs/{id}), or with a JobError.
const DefaultJobSubject = "shaper.job"

// JobError is the answer to a job status request over NATS that has no
// job to tell of: Code is the HTTP status GET /v1/jobs/{id} would have
// answered (404 unknown or past the horizon, 503 unavailable).
type JobError struct {
	Code  int    `json:"code"`
	Error string `json:"error"`
}

// DefaultLaneSubject is the root of the direct lane's subjects: a request
// to <root>.<policy> is answered by a shaper with the policy's Lane, and
// every shaper publishes it again on <root>.<policy>.state when it changes.
const DefaultLaneSubject = "shaper.lane"

// Lane says whether and where a producer may publish a policy's jobs
// straight into its queue stream (Direct): the answer to a request to
// <DefaultLaneSubject>.<policy>.
type Lane struct {
	Policy string `json:"policy"`
	// Open says the lane may be used: the policy's admission does nothing
	// that storing the job does not (no admit: limit, no overflow: defer,
	// no queue size lowered below its stream's limit). Refused says why
	// not, when it is closed.
	Open    bool   `json:"open"`
	Refused string `json:"refused,omitempty"`
	// Code is 200, or 404 for a policy the shaper does not serve.
	Code int `json:"code"`
	// Stream is the policy's queue stream; the jobs of the key with token
	// t (queue.EncodeKey) are stored on Subject+t.
	Stream  string `json:"stream,omitempty"`
	Subject string `json:"subject,omitempty"`
	// Epoch is the stream's epoch, the first part of the id of a job
	// stored at a sequence (queue.JobID).
	Epoch string `json:"epoch,omitempty"`
	// MaxPayload is the largest payload the shaper takes, in bytes; Queue
	// how many jobs a key holds.
	MaxPayload int `json:"max_payload,omitempty"`
	Queue      int `json:"queue,omitempty"`
	// FullRetryAfterMs is the RetryAfter of a job the lane finds its key
	// full for: the policy's outflow interval, in milliseconds (at least 1).
	FullRetryAfterMs int64 `json:"full_retry_after_ms,omitempty"`
}

// Health is the answer to GET /healthz.
type Health struct {
	Status        string `json:"status"`
	UptimeSeconds int    `json:"uptime_s"`
}

// RemovedPolicy is a policy that a reload of the answering shaper removed
// while its streams still held jobs: they stay there, undelivered, until a
// policy file serves it again (GET /v1/policies, "removed").
type RemovedPolicy struct {
	Name     string    `json:"name"`
	Queued   uint64    `json:"queued"`
	Deferred uint64    `json:"deferred"`
	At       time.Time `json:"removed_at"`
}

// policyList is the envelope of GET /v1/policies.
type policyList struct {
	Policies []Policy        `json:"policies"`
	Removed  []RemovedPolicy `json:"removed"`
}
