package shaper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/queue"
	"github.com/shaper-dev/shaper/shaper/internal/admission"
)

// table is the policies a Shaper serves and the pipeline of each. The set
// of policies is fixed at start (the file's); each policy's live version
// may differ from the file's by an override (live tuning). Safe for
// concurrent use once opened.
//
// Live tuning (PUT /v1/policies/{name}) changes a policy while the shaper
// runs; the change is kept as an override in the cluster's bucket, which
// every shaper watches and applies, and which outlives restarts. DELETE
// /v1/policies/{name}/override returns the policy to its file. What can
// change: outflow and total (from each key's next slot), queue (a larger
// size at once; a smaller one is enforced by admission, since shrinking the
// stream's limit over live jobs would purge them), overflow, retry and
// admit. Where jobs are delivered cannot change while running.
type table struct {
	mu    sync.RWMutex
	file  *policies.Set      // as the policy file says (replaced by a reload)
	lines map[string]*served // one per policy served; the live version is its gate's

	// deadCount returns how many dead letters a policy has, from memory;
	// set once the dead letters are open (setDeadCount).
	deadCount func(policy string) uint64
}

func newTable(file *policies.Set) *table {
	return &table{file: file, lines: make(map[string]*served)}
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
	defer t.mu.Unlock()
	t.lines[name] = line
}

// remove stops serving policy name and returns its pipeline (nil when it
// had none): submissions to it are answered 404 from now on.
func (t *table) remove(name string) *served {
	t.mu.Lock()
	defer t.mu.Unlock()
	line := t.lines[name]
	delete(t.lines, name)
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

// waiting says why the queued jobs of policy wait (jobs.Waiting): for
// a consumer, when its deliveries find nobody to answer them.
func (t *table) waiting(policy string) string {
	t.mu.RLock()
	line := t.lines[policy]
	t.mu.RUnlock()
	if line == nil || line.waiting == nil {
		return ""
	}
	if since := line.waiting(); !since.IsZero() {
		return fmt.Sprintf("%s since %s", drain.WaitingForConsumer, since.UTC().Format(time.RFC3339))
	}
	return ""
}

// override applies a stored override of policy name, or takes the policy
// back to its file when p is nil. An override of a policy this shaper's
// file does not have is ignored.
func (t *table) override(ctx context.Context, name string, p *policies.Policy, log *slog.Logger) error {
	if t.line(name) == nil {
		return nil
	}
	if p == nil {
		file, ok := t.fileVersion(name)
		if !ok {
			return nil
		}
		return t.apply(ctx, file, false, log)
	}
	return t.apply(ctx, *p, true, log)
}

// normalize checks that p may replace the live version of its policy and
// returns it with its defaults filled in, validated as the policy file
// would be.
func (t *table) normalize(p policies.Policy) (policies.Policy, error) {
	line := t.line(p.Name)
	if line == nil {
		return p, fmt.Errorf("unknown policy %q", p.Name)
	}
	if !reflect.DeepEqual(line.Gate.Policy().Deliver, p.Deliver) {
		return p, errors.New("deliver cannot change while running: edit the policy file and restart")
	}
	t.mu.RLock()
	next, err := t.file.With(p)
	t.mu.RUnlock()
	if err != nil {
		return p, err
	}
	p, _ = next.Lookup(p.Name)
	return p, nil
}

// apply makes p the live version of its policy on this shaper.
func (t *table) apply(ctx context.Context, p policies.Policy, override bool, log *slog.Logger) error {
	p, err := t.normalize(p)
	if err != nil {
		return err
	}
	line := t.line(p.Name)
	if line == nil {
		return fmt.Errorf("unknown policy %q", p.Name)
	}
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
	if !reflect.DeepEqual(*old, p) {
		log.Info("policy changed", "policy", p.Name, "outflow", p.Outflow.String(), "queue", p.Queue,
			"overflow", p.Overflow, "total", p.Total.String(), "override", override)
	}
	return nil
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
