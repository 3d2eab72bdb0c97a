package admission

import (
	"fmt"

	"github.com/shaper-dev/shaper/policies"
)

// The direct lane (client.Direct) lets a producer publish a job straight
// into the policy's queue stream, with JetStream's own ack and per-key
// limit, skipping the Gate. That changes no outcome only where the Gate
// does nothing but store. Besides storing, a Gate:
//
//  1. checks the key and the payload's size — the lane checks both the
//     same way (queue.Layout.Message, with the queue's limit);
//  2. applies the admission limit of an admit block, shadow or not —
//     only the Gate can: the lane is refused;
//  3. keeps a defer policy's jobs in submission order behind the key's
//     deferred jobs, and defers a job the full key refuses — only the
//     Gate can: the lane is refused;
//  4. enforces a queue size lowered live over the stream's larger
//     per-key limit (decide) — the store cannot, so neither can the lane:
//     refused while the size is below the limit;
//  5. answers a full key from its full-key cache without asking the store
//     — the store gives the same answer, so no outcome changes; the lane
//     only cannot tell when a slot frees (the Retry-After);
//  6. dedupes a submission with an Idempotency-Key by its Nats-Msg-Id —
//     the lane sets the same one (queue.DedupeID): each way dedupes the
//     other's;
//  7. reads the drainer's schedule for an accepted job's queued count and
//     ETA (with a total cap, waiting briefly for the drainer to see every
//     job stored before it) — only the answer changes: the lane answers
//     without them;
//  8. counts its decisions, tells Config.Observe (a recording) and traces
//     the store — a lane job is seen by nothing before the drainer's watch
//     reports it: it is in no admission count and no recording.
//
// Items 2 to 4 change outcomes: DirectLane refuses them. Job records are
// no concern: an accepted job has none, its id naming where it is stored,
// which the lane's ids do as well.

// DirectLane reports whether jobs may be published straight into the
// queue under the policy g admits under now, and when not, why.
func (g *Gate) DirectLane() (ok bool, refused string) {
	p := g.policy.Load()
	switch {
	case p.Admit != nil:
		return false, fmt.Sprintf("policy %q has an admission limit (admit: %s), which only the shaper applies", p.Name, p.Admit.Limit)
	case p.Overflow == policies.OverflowDefer:
		return false, fmt.Sprintf("policy %q defers the jobs of a full key (overflow: defer), which only the shaper does", p.Name)
	case p.Queue < g.queue.Limit():
		return false, fmt.Sprintf("policy %q's queue size %d is below its stream's per-key limit %d (a size lowered while running: the stream keeps its limit until a restart finds the queue empty), which only the shaper enforces", p.Name, p.Queue, g.queue.Limit())
	}
	return true, ""
}
