package shaper

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/queue"
	"github.com/shaper-dev/shaper/shaper/client"
	"github.com/shaper-dev/shaper/shaper/internal/admission"
	"github.com/shaper-dev/shaper/shaper/internal/jobs"
)

// table is the policies a Shaper serves and the pipeline of each. The set
// of policies is the file's (replaced by a reload); each policy's live
// version is the file's Patch merged with its live override, resolved.
// Safe for concurrent use once opened.
//
// Live tuning (PUT /v1/policies/{name}) changes a policy while the shaper
// runs. A change is a JSON merge patch (policies.Patch): the override is
// the merge of the changes since the last reset, kept in the cluster's
// bucket, which every shaper watches and applies, and which outlives
// restarts. A field the override leaves out is the file's (so a reload
// changes it); DELETE /v1/policies/{name}/override drops the override.
// What can change: outflow and total (re-planning the slots keys wait for at once), queue (a
// larger size at once; a smaller one is enforced by admission, since
// shrinking the stream's limit over live jobs would purge them), overflow,
// retry and admit. Where jobs are delivered cannot change while running.
type table struct {
	mu        sync.RWMutex
	file      *policies.Set             // as the policy file says (replaced by a reload)
	overrides map[string]policies.Patch // the live override of each policy that has one
	// overrideRev is the bucket revision of the override applied last, per
	// policy: an older one (a watch event arriving after this shaper
	// applied its own newer change) is not applied.
	overrideRev map[string]uint64
	lines       map[string]*served // one per policy served; the live version is its gate's
	applying    sync.Mutex         // serialises refresh
	// removed are the policies a reload of this shaper removed while they
	// held jobs, until one serves them again (GET /v1/policies "removed").
	removed map[string]client.RemovedPolicy

	// deadCount returns how many dead letters a policy has, from memory;
	// set once the dead letters are open (setDeadCount).
	deadCount func(policy string) uint64
	// changed, when set, is told the name of a policy added, removed or
	// changed live (the direct lane's announcements); set before use.
	changed func(name string)
}

// notify tells t.changed that policy name changed.
func (t *table) notify(name string) {
	if t.changed != nil {
		t.changed(name)
	}
}

func newTable(file *policies.Set) *table {
	return &table{file: file, overrides: make(map[string]policies.Patch), overrideRev: make(map[string]uint64), lines: make(map[string]*served)}
}

// setDeadCount makes count the source of each policy's dead letters count.
func (t *table) setDeadCount(count func(policy string) uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.deadCount = count
}

// add makes line the pipeline of policy name.
func (t *table) add(name string, line *served) {
	t.mu.Lock()
	t.lines[name] = line
	t.mu.Unlock()
	t.notify(name)
}

// remove stops serving policy name and returns its pipeline (nil when it
// had none): submissions to it are answered 404 from now on.
func (t *table) remove(name string) *served {
	t.mu.Lock()
	line := t.lines[name]
	delete(t.lines, name)
	t.mu.Unlock()
	t.notify(name)
	return line
}

// fileVersion returns policy name as the policy file says.
func (t *table) fileVersion(name string) (policies.Policy, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.file.Lookup(name)
}

// line returns the pipeline of the named policy, or nil.
func (t *table) line(name string) *served {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.lines[name]
}

// gate returns the admission gate and queue of the named policy, nil for
// an unknown one (ingress.Config.Gate).
func (t *table) gate(name string) (*admission.Gate, *queue.Queue) {
	if line := t.line(name); line != nil {
		return line.Gate, line.queue
	}
	return nil, nil
}

// names returns the names of the policies served, sorted.
func (t *table) names() []string {
	lines := t.snapshot()
	names := make([]string, len(lines))
	for i, l := range lines {
		names[i] = l.name
	}
	return names
}

// namedLine is a policy served, as a snapshot of the table holds it.
type namedLine struct {
	name string
	*served
}

// snapshot returns the policies served now with their pipelines, sorted
// by name: a reader that goes over every policy reads the table once, so
// that a reload removing a policy meanwhile cannot leave it a name
// without a pipeline.
func (t *table) snapshot() []namedLine {
	t.mu.RLock()
	lines := make([]namedLine, 0, len(t.lines))
	for n, l := range t.lines {
		lines = append(lines, namedLine{n, l})
	}
	t.mu.RUnlock()
	slices.SortFunc(lines, func(a, b namedLine) int { return strings.Compare(a.name, b.name) })
	return lines
}

// queueOf returns the policy and queue whose stream made job id, and the
// job's sequence (jobs.Finder).
func (t *table) queueOf(id string) (string, *queue.Queue, uint64, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	for name, line := range t.lines {
		if seq, ok := line.queue.SeqOf(id); ok {
			return name, line.queue, seq, true
		}
	}
	return "", nil, 0, false
}

// waiting says why the queued jobs of key of policy wait (jobs.Waiting):
// for a consumer, when the deliveries of the shaper that delivers the key
// find nobody to answer them — its own answer, asked of it like a 429's
// (answers.View.KeyConsumer), not this shaper's sink, which delivers
// nothing of a partition another shaper holds.
func (t *table) waiting(policy, key string) string {
	line, token, ok := t.keyLine(policy, key)
	if !ok {
		return ""
	}
	if _, since := line.answers.KeyConsumer(token, time.Now()); !since.IsZero() {
		return fmt.Sprintf("%s since %s", drain.WaitingForConsumer, since.UTC().Format(time.RFC3339))
	}
	return ""
}

// nextTry returns when the failed job id of key of policy is tried again
// (jobs.NextTry), by the schedule of the shaper that delivers the key
// (answers.View.NextTry).
func (t *table) nextTry(policy, key, id string) (time.Time, bool) {
	line, token, seq, ok := t.jobAt(policy, key, id)
	if !ok {
		return time.Time{}, false
	}
	now := time.Now()
	in, ok := line.answers.NextTry(token, seq, now)
	return now.Add(in), ok
}

// delivering says whether the queued job id of key of policy is being
// delivered (jobs.Delivering), by the drainer of the key's partition
// (answers.View.Delivering).
func (t *table) delivering(policy, key, id string) (time.Time, int, bool) {
	line, token, seq, ok := t.jobAt(policy, key, id)
	if !ok {
		return time.Time{}, 0, false
	}
	return line.answers.Delivering(token, seq, time.Now())
}

// jobAt returns the line of policy, the token of key and the sequence of
// job id in its queue: false when this shaper does not serve the policy,
// or id is not a job of its queue (keyLine, queue.Queue.SeqOf).
func (t *table) jobAt(policy, key, id string) (*served, string, uint64, bool) {
	line, token, ok := t.keyLine(policy, key)
	if !ok {
		return nil, "", 0, false
	}
	seq, ok := line.queue.SeqOf(id)
	return line, token, seq, ok
}

// jobDrain is what job status reads of the queues and asks the drainers.
func (t *table) jobDrain() jobs.Drain {
	return jobs.Drain{Find: t.queueOf, Waiting: t.waiting, NextTry: t.nextTry, Delivering: t.delivering}
}

// keyLine returns the line of policy and the token of key, false for a
// policy this shaper does not serve or a key no queue can hold.
func (t *table) keyLine(policy, key string) (*served, string, bool) {
	t.mu.RLock()
	line := t.lines[policy]
	t.mu.RUnlock()
	token, err := queue.EncodeKey(key)
	return line, token, line != nil && err == nil
}

// errDeliver refuses a live change of where jobs are delivered.
var errDeliver = errors.New("deliver cannot change while running: edit the policy file and restart")

// errPartitions refuses a live change of the number of partitions.
var errPartitions = errors.New("partitions cannot change while running: edit the policy file and restart the shapers")

// override makes p, stored at revision rev of the overrides bucket, the
// live override of policy name (nil: none, back to the file), unless an
// override as new or newer was applied (rev not above it; rev 0, nothing
// stored, only when none was), and applies the newest: a watch event
// arriving after this shaper applied its own newer change does not undo
// it, and a caller returns with the newest applied. The override of a
// policy this shaper does not serve is kept, for a reload that adds the
// policy.
func (t *table) override(ctx context.Context, name string, p *policies.Patch, rev uint64, log *slog.Logger) error {
	t.mu.Lock()
	if last := t.overrideRev[name]; rev > last || rev == 0 && last == 0 {
		t.overrideRev[name] = rev
		if p == nil || p.IsEmpty() {
			delete(t.overrides, name)
		} else {
			t.overrides[name] = *p
		}
	}
	t.mu.Unlock()
	if t.line(name) == nil {
		return nil
	}
	return t.refresh(ctx, name, "live change", log)
}

// overrideOf returns the live override of policy name: the empty Patch
// when it has none.
func (t *table) overrideOf(name string) policies.Patch {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.overrides[name]
}

// compose returns policy name as the Patch of its file merged with over
// (an override), resolved and validated as the policy file would be.
func (t *table) compose(name string, over policies.Patch) (policies.Policy, error) {
	t.mu.RLock()
	patch, ok := t.file.Patch(name)
	file, _ := t.file.Lookup(name)
	t.mu.RUnlock()
	if !ok {
		return policies.Policy{}, fmt.Errorf("unknown policy %q", name)
	}
	p, err := patch.Merge(over).Resolve()
	if err != nil {
		return p, err
	}
	p.Line = file.Line
	return p, nil
}

// deliverOf returns where policy name delivers by the Patch of its file
// merged with over, and false when that is no delivery target.
func (t *table) deliverOf(name string, over policies.Patch) (policies.Deliver, bool) {
	t.mu.RLock()
	patch, _ := t.file.Patch(name)
	t.mu.RUnlock()
	only := policies.Patch{ // deliver and what its defaults depend on
		Name:    policies.Value(name),
		Outflow: policies.Value(policies.Rate{N: 1, Per: time.Second}),
		Queue:   policies.Value(1),
		Deliver: patch.Merge(over).Deliver,
	}
	p, err := only.Resolve()
	return p.Deliver, err == nil
}

// refresh makes the live version of policy name what its file and its
// override say now, but for where jobs are delivered, which stays as it
// runs. from says what changed, for the log: "file" (a reload) or "live
// change" (an override).
func (t *table) refresh(ctx context.Context, name, from string, log *slog.Logger) error {
	// One at a time: a refresh reading an older override must not apply
	// it over one that read a newer.
	t.applying.Lock()
	defer t.applying.Unlock()
	line := t.line(name)
	if line == nil {
		return fmt.Errorf("unknown policy %q", name)
	}
	over := t.overrideOf(name)
	p, err := t.compose(name, over)
	if err != nil {
		return err
	}
	p.Deliver = line.Policy().Deliver
	p.Partitions = line.Policy().Partitions // both change only with a restart
	return t.apply(ctx, line, p, !over.IsEmpty(), from, log)
}

// apply makes p the live version of its policy, served by line; override
// says whether a live override sets some of its fields, from what changed.
func (t *table) apply(ctx context.Context, line *served, p policies.Policy, override bool, from string, log *slog.Logger) error {
	old := line.Policy()
	if err := line.queue.Resize(ctx, p.Queue); err != nil {
		return err
	}
	if err := line.deferQueue.Resize(ctx, admission.DeferredSize(p)); err != nil {
		return err
	}
	if err := line.SetPolicy(p); err != nil {
		return err
	}
	line.override.Store(override)
	t.notify(p.Name)
	if changes := policies.Diff(*old, p); len(changes) > 0 {
		log.Info("policy changed", "policy", p.Name, "change", joinChanges(changes), "from", from, "live_override", override)
	}
	return nil
}

// joinChanges words changes as "outflow 20/s → 50/s, queue 10 → 20".
func joinChanges(changes []policies.Change) string {
	out := make([]string, len(changes))
	for i, c := range changes {
		out[i] = c.String()
	}
	return strings.Join(out, ", ")
}

// sweep has every gate forget what it no longer needs about idle keys,
// every 10 s until ctx ends.
func (t *table) sweep(ctx context.Context) {
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			for _, line := range t.snapshot() {
				line.Gate.Sweep(now)
			}
		}
	}
}

// inFlight counts the deliveries and re-admissions in progress.
func (t *table) inFlight() int {
	n := 0
	for _, line := range t.snapshot() {
		n += line.Drain.Stats().InFlight + line.DeferDrain.Stats().InFlight
	}
	return n
}

// stop stops every pipeline (see served.stop), at once.
func (t *table) stop(ctx context.Context, log *slog.Logger) {
	var wg sync.WaitGroup
	for _, line := range t.snapshot() {
		wg.Go(func() { line.stop(ctx, log) })
	}
	wg.Wait()
}

// leaving reports whether a policy's answers are still given for a
// partition this shaper released (answers.View.Leaving).
func (t *table) leaving() bool {
	for _, line := range t.snapshot() {
		if line.answers != nil && line.answers.Leaving() {
			return true
		}
	}
	return false
}

// fileDigests returns, for each policy served, a digest of it as the
// policy file sets it (cluster.Cluster.SetFileDigests): shapers whose
// files set a policy alike give it the same digest.
func (t *table) fileDigests() map[string]string {
	out := map[string]string{}
	for _, line := range t.snapshot() {
		if p, ok := t.fileVersion(line.name); ok {
			b, _ := json.Marshal(p)
			sum := sha256.Sum256(b)
			out[line.name] = hex.EncodeToString(sum[:8])
		}
	}
	return out
}

// layouts returns the policies served, with the number of partitions each
// is drained in (cluster.Cluster.SetReady).
func (t *table) layouts() map[string]int {
	out := map[string]int{}
	for _, line := range t.snapshot() {
		out[line.name] = line.Drain.Partitions()
	}
	return out
}
