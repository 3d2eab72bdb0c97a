// Package admission is the one decision of a policy's admission: may this
// job enter this key's queue now, and if not, when may it come back?
//
// A Gate answers it for one policy, for a job submitted over HTTP or NATS
// and for a deferred job re-admitted alike, with a Decision: Accepted,
// Full (with the time until the key's next slot frees), Deferred (the job
// kept, with its id and expected start), Limited (the admission limit's
// Retry-After), Unavailable or Invalid.
//
// The decision is made in one order:
//
//  1. the request itself: its key and its payload's size (Invalid);
//  2. the admission limit of the policy's admit block (Limited, or
//     Unavailable when its Redis fails and the policy fails closed);
//  3. the key's verdict (decide): what the Gate knows without a round
//     trip — the key known full (the full-key cache), deferred jobs the
//     job must queue behind (a defer policy keeps submission order), or a
//     queue size lowered live over the store's larger limit;
//  4. the Store, whose atomic per-key limit is the final word: a refusal
//     there is Full, or Deferred for a defer policy.
//
// Admit runs all of it and may block. Reserve runs what needs no network and
// says what comes next (Step): the decision is made, the job is to be stored
// (asynchronously, then Settle), or the rest may block (call Admit on a
// goroutine that may wait). The NATS ingress pipelines submissions this way.
//
// A Gate works on any Store and View: the JetStream queue and its drainer
// in the shaper, the in-memory queue and a driven drainer in a replay. Its
// clock for re-admissions (Config.Now) is injected for the same reason;
// every other method takes now.
package admission
