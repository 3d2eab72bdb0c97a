// Package queue keeps shaper's bounded per-key queues in NATS JetStream.
//
// Each policy has one stream, SHAPER_Q_<policy>, capturing the subjects
// shaper.q.<policy>.<token>, where token is the key's subject token (see
// EncodeKey). The stream is created with
//
//	Discard: DiscardNew, DiscardNewPerSubject: true, MaxMsgsPerSubject: <queue size>
//
// so the JetStream server itself refuses a job for a key that already holds
// its queue size: atomically, in an R3 cluster too, and for every shaper at
// once. That refusal (API error 10077, "maximum messages per subject
// exceeded") comes back from Admit as ErrFull; a stream-wide limit with the
// same code as ErrStreamFull; a server or account out of storage
// ("insufficient resources") as ErrStorageFull, which is also an
// ErrUnavailable; an unreachable or silent JetStream as ErrUnavailable. Without DiscardNewPerSubject the server would silently drop
// the oldest job instead, so the stream is never run that way.
//
// A job submitted without an id of its own gets the id of where it is
// stored (the stream's creation time and the sequence, see JobID), so a job
// can be found from its id alone and admission stores no id and no dedupe
// entry for it; a producer's Idempotency-Key becomes its Nats-Msg-Id, so a
// retry within the duplicate window stores nothing new and gets the same id.
// A job with an id (one re-admitted from the deferred queue) is published
// with Nats-Msg-Id set to that id. Only what cannot be derived is stored:
// key, policy and enqueue time come from the subject, the stream and the
// stream's timestamp.
//
// The drain side does not use a consumer per key (a stream allows 1,000
// consumers by default): Watch streams a headers-only notice of every stored
// job, which is how a drainer learns which keys have work and at which
// sequences; it reads a job by sequence (Get, one index lookup), or searches
// a key's subject from a sequence on (Next, a scan: only when the sequences
// are unknown), and frees the slot by deleting the message once it is
// delivered (Remove).
//
// Keys are arbitrary UTF-8 strings of up to MaxKeyLen bytes. EncodeKey maps a
// key injectively onto one subject token: keys of [A-Za-z0-9_-] are their own
// token, any other key is "~" plus the unpadded base64url of its bytes, so no
// key can smuggle in a '.', a wildcard or a system prefix. The original key
// always travels in the Shaper-Key header.
package queue
