package shaper

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shaper-dev/shaper/drain/adapt"
	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/shaper/client"
	"github.com/shaper-dev/shaper/shaper/internal/cluster"
	"github.com/shaper-dev/shaper/shaper/internal/deadletter"
	"github.com/shaper-dev/shaper/shaper/internal/httpapi"
)

// PolicyStatus is a policy with its live figures, as GET /v1/policies shows it.
type PolicyStatus struct {
	policies.Policy
	Keys   int   `json:"keys"`   // keys with jobs queued
	Queued int64 `json:"queued"` // jobs queued over all keys
	// QueuedDraining is Queued in the partitions this shaper drains: exact,
	// where its view of the others' lags their holders' removals; summed
	// over the shapers, the policy's queued jobs.
	QueuedDraining int64  `json:"queued_draining"`
	Admitted       uint64 `json:"admitted"`       // jobs accepted (202) since start
	Duplicates     uint64 `json:"duplicates"`     // resubmissions answered from the duplicate window
	Rejected       uint64 `json:"rejected"`       // jobs refused with 429 since start
	Unavailable    uint64 `json:"unavailable"`    // submissions answered 503
	Limited        uint64 `json:"limited"`        // submissions refused by the admission limit
	Shadow         uint64 `json:"shadow_limited"` // submissions a shadow admission limit would have refused
	LimiterErrs    uint64 `json:"limiter_errors"` // admission decisions the limiter backend failed
	// LimiterDownSince is when the admission limiter's backend (Redis)
	// began failing this shaper's decisions, while it still does.
	LimiterDownSince time.Time `json:"limiter_unavailable_since,omitzero"`
	// RestartPending lists the changes of the policy file, reloaded, that
	// apply only at a restart ("partitions 4 → 2").
	RestartPending []string `json:"restart_pending,omitempty"`
	Deferred       uint64   `json:"deferred"`         // jobs deferred (429 deferred) since start
	DeferQueued    int64    `json:"deferred_queued"`  // deferred jobs waiting for re-admission
	Readmitted     uint64   `json:"readmitted"`       // deferred jobs put back into their queue since start
	Dead           uint64   `json:"dead"`             // dead letters kept for the policy
	Delivered      uint64   `json:"delivered"`        // jobs delivered since start
	Failed         uint64   `json:"failed"`           // failed delivery attempts since start
	Retries        uint64   `json:"retries"`          // attempts that retried a failed job (the retry budget's use)
	RetriesHeld    uint64   `json:"retries_deferred"` // slots in which a due retry gave way to a fresh job (budget spent)
	Aside          int      `json:"stepped_aside"`    // failed jobs waiting for a retry while their key's fresh jobs go on
	Override       bool     `json:"override"`         // tuned live: a live override applies
	// Overridden lists the fields the live override sets or resets, by
	// their path in the policy file ("retry.attempts"; "admit" when it is
	// off); the others are the file's.
	Overridden []string `json:"overridden,omitempty"`
	// DirectLane says producers may publish the policy's jobs straight
	// into its queue stream (client.Direct); DirectLaneRefused says why
	// not, when they may not.
	DirectLane        bool   `json:"direct_lane"`
	DirectLaneRefused string `json:"direct_lane_refused,omitempty"`
	Draining          bool   `json:"draining"`  // this shaper holds the policy's drain lease (of one partition at least)
	InFlight          int    `json:"in_flight"` // deliveries in progress
	// Partitions is how many partitions the policy is drained in, and
	// DrainingPartitions those this shaper drains (Policy.Partitions).
	Partitions         int   `json:"partitions"`
	DrainingPartitions []int `json:"draining_partitions"`
	// Drainers names, for each partition, the shaper holding its drain
	// lease ("" when none does): read from the cluster by the HTTP API,
	// at most a second old.
	Drainers []string `json:"drainers,omitempty"`
	// DrainersUnrenewed gives, for a drainer that missed a renewal of
	// its lease (it renews every third of the lease TTL), the
	// milliseconds since it last renewed, by the NATS server's clock: a
	// lost shaper stays among the drainers until its lease ends, a lease
	// TTL after its last renewal.
	DrainersUnrenewed map[string]int64 `json:"drainers_unrenewed_ms,omitempty"`
	// PartitionsInUse is the number of partitions the other shapers drain
	// the policy in, when their files say another than this shaper's
	// (Partitions): this one stands by until they stop, and Drainers are
	// theirs.
	PartitionsInUse int `json:"partitions_in_use,omitempty"`
	// FileDiffersOn names the other shapers whose policy file sets the
	// policy otherwise than this shaper's (by the digests in their
	// membership entries): the drainer paces its keys by its own file,
	// each shaper answers its producers by its own. Give every shaper
	// the same file and reload each.
	FileDiffersOn []string `json:"file_differs_on,omitempty"`
	// Adapting is what the policy's adaptive outflow (its adapt block)
	// does on this shaper now: the effective rate of an adaptive total,
	// and those of the deepest keys that adapt, each with why.
	Adapting *adapt.Rates `json:"adapting,omitempty"`
	// WaitingForConsumer is since when this shaper's deliveries of the
	// policy have found no consumer to answer them (nobody subscribed to
	// its deliver subject): its jobs stay queued until one subscribes.
	// Absent while they find one, and on a shaper that drains none of
	// the policy's partitions.
	WaitingForConsumer *time.Time `json:"waiting_for_consumer_since,omitempty"`
}

// adaptingKeys is how many of the deepest keys a status shows the
// adaptive rate of.
const adaptingKeys = 5

// status returns every policy with its live figures, sorted by name.
func (t *table) status(ctx context.Context) []PolicyStatus {
	lines := t.snapshot()
	out := make([]PolicyStatus, len(lines))
	for i, line := range lines {
		out[i] = t.lineStatus(ctx, line.name, line.served)
	}
	return out
}

// policyStatus returns policy name with its live figures, and false when
// it is not served.
func (t *table) policyStatus(ctx context.Context, name string) (PolicyStatus, bool) {
	line := t.line(name)
	if line == nil {
		return PolicyStatus{}, false
	}
	return t.lineStatus(ctx, name, line), true
}

// lineStatus returns the live figures of policy name, served by line.
func (t *table) lineStatus(ctx context.Context, name string, line *served) PolicyStatus {
	ds := line.Drain.Stats()
	c := line.Gate.Counts()
	st := PolicyStatus{
		Policy:           *line.Gate.Policy(),
		Keys:             ds.Keys,
		Queued:           ds.Queued,
		QueuedDraining:   ds.QueuedDraining,
		Admitted:         c.Admitted,
		Duplicates:       c.Duplicates,
		Rejected:         c.Rejected,
		Unavailable:      c.Unavailable,
		Limited:          c.Limited,
		Shadow:           c.ShadowLimited,
		LimiterErrs:      c.LimiterErrors,
		LimiterDownSince: c.LimiterDownSince,
		RestartPending:   t.restartPending(name, line),
		Deferred:         c.Deferred,
		DeferQueued:      line.DeferDrain.Stats().Queued,
		Readmitted:       c.Readmitted,
		Delivered:        ds.Delivered,
		Failed:           ds.Failed,
		Retries:          ds.Retries,
		RetriesHeld:      ds.RetriesDeferred,
		Aside:            ds.SteppedAside,
		Override:         line.override.Load(),
		Overridden:       t.overrideOf(name).Paths(),
		Draining:         line.Drain.Active(),
		InFlight:         ds.InFlight,
		Partitions:       line.Drain.Partitions(),
	}
	if st.Adapt != nil {
		st.Adapting = line.Drain.Adapting(adaptingKeys)
	}
	st.DirectLane, st.DirectLaneRefused = line.Gate.DirectLane()
	st.DrainingPartitions = append([]int{}, line.Drain.ActiveParts()...)
	if since := line.answers.Waiting(); !since.IsZero() {
		since = since.UTC()
		st.WaitingForConsumer = &since
	}
	t.mu.RLock()
	deadCount := t.deadCount
	t.mu.RUnlock()
	if deadCount != nil {
		st.Dead = deadCount(name)
	}
	return st
}

// routes adds the policy routes to mux:
//
//	GET    /v1/policies                  every policy with its live figures
//	GET    /v1/policies/{name}           one policy
//	PUT    /v1/policies/{name}           change it live: a JSON merge patch (policies.Patch)
//	DELETE /v1/policies/{name}/override  back to the policy file
//
// Overrides are stored in c, for every shaper. Tuning is behind admin.
func (t *table) routes(mux *httpapi.Mux, c *cluster.Cluster, admin httpapi.Guard, log *slog.Logger) {
	mux.HandleFunc("GET /v1/policies", func(w http.ResponseWriter, r *http.Request) {
		all := t.status(r.Context())
		for i := range all {
			all[i].setCluster(r.Context(), c)
		}
		httpapi.WriteJSON(w, http.StatusOK, map[string]any{"policies": all, "removed": t.removedPolicies()})
	})
	mux.HandleFunc("GET /v1/policies/{name}", func(w http.ResponseWriter, r *http.Request) {
		t.writeStatus(w, r, c, r.PathValue("name"))
	})
	mux.HandleFunc("PUT /v1/policies/{name}", admin(func(w http.ResponseWriter, r *http.Request) {
		t.handlePut(w, r, c, log)
	}))
	mux.HandleFunc("DELETE /v1/policies/{name}/override", admin(func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		if _, ok := t.fileVersion(name); !ok || t.line(name) == nil {
			httpapi.Error(w, http.StatusNotFound, httpapi.UnknownPolicy(name, t.names()))
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		rev, err := c.DeleteOverride(ctx, name)
		if err != nil {
			httpapi.Unavailable(w, "backend", err)
			return
		}
		if err := t.override(ctx, name, nil, rev, log); err != nil {
			httpapi.Unavailable(w, "backend", err)
			return
		}
		t.writeStatus(w, r, c, name)
	}))
}

func (t *table) writeStatus(w http.ResponseWriter, r *http.Request, c *cluster.Cluster, name string) {
	st, ok := t.policyStatus(r.Context(), name)
	if !ok {
		httpapi.Error(w, http.StatusNotFound, httpapi.UnknownPolicy(name, t.names()))
		return
	}
	st.setCluster(r.Context(), c)
	httpapi.WriteJSON(w, http.StatusOK, st)
}

// setCluster reads from c who drains the policy's partitions, and which
// shapers' files set it otherwise.
func (st *PolicyStatus) setCluster(ctx context.Context, c *cluster.Cluster) {
	st.FileDiffersOn = c.FileDiffersOn(st.Name)
	n := st.Partitions
	if st.PartitionsInUse = c.LayoutInUse(st.Name); st.PartitionsInUse != 0 {
		n = st.PartitionsInUse
	}
	var quiet map[string]time.Duration
	st.Drainers, quiet = c.Drainers(ctx, st.Name, n)
	for who, d := range quiet {
		if st.DrainersUnrenewed == nil {
			st.DrainersUnrenewed = map[string]int64{}
		}
		st.DrainersUnrenewed[who] = d.Milliseconds()
	}
}

// refused is a live change that is not allowed: answered 400.
type refused struct{ error }

// handlePut serves PUT /v1/policies/{name}: the body is a JSON merge patch
// of the policy as GET shows it (policies.Patch), merged into the live
// override: {"outflow": "10/s", "retry": {"attempts": 3}} changes those
// two fields and nothing else, a null resets a field to the policy file's
// value (or the default), total "" or "off" is no cap and admit "off" no
// admission limit. Bad input of any kind changes nothing and is answered
// 400 naming the field.
// maxPolicyBody bounds the body of a live policy change, the largest an
// admin route reads.
const maxPolicyBody = 64 << 10

func (t *table) handlePut(w http.ResponseWriter, r *http.Request, c *cluster.Cluster, log *slog.Logger) {
	name := r.PathValue("name")
	line := t.line(name)
	if line == nil {
		httpapi.Error(w, http.StatusNotFound, httpapi.UnknownPolicy(name, t.names()))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxPolicyBody))
	if err != nil {
		httpapi.Error(w, http.StatusRequestEntityTooLarge, "policy body: "+err.Error())
		return
	}
	change, err := policies.ParsePatch(body)
	if err != nil {
		httpapi.Error(w, http.StatusBadRequest, inPolicy(name, err))
		return
	}
	if n, ok := change.Name.Get(); ok && n != name || change.Name.IsNull() {
		httpapi.Error(w, http.StatusBadRequest, "policy "+httpapi.Quote(name)+": name cannot change")
		return
	}
	change.Name = policies.Field[string]{}
	running := line.Policy().Deliver
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	over, rev, err := c.PutOverride(ctx, name, func(old policies.Patch) (policies.Patch, error) {
		next := old.Merge(change)
		if !change.Deliver.IsZero() {
			if d, ok := t.deliverOf(name, next); !ok || d != running {
				return next, refused{errDeliver}
			}
		}
		next.Deliver = policies.Field[policies.DeliverPatch]{} // never stored: it cannot change
		if !change.Partitions.IsZero() {
			p, err := t.compose(name, next)
			switch {
			case err != nil: // a bad value (0, -1, 100000): its own error, not "cannot change"
				return next, refused{err}
			case p.Parts() != line.Policy().Parts():
				return next, refused{errPartitions}
			}
		}
		next.Partitions = policies.Field[int]{} // never stored either
		if _, err := t.compose(name, next); err != nil {
			return next, refused{err}
		}
		return next, nil
	})
	var no refused
	switch {
	case errors.As(err, &no):
		httpapi.Error(w, http.StatusBadRequest, inPolicy(name, no.error))
		return
	case err != nil:
		httpapi.Unavailable(w, "backend", err)
		return
	}
	// Apply here at once as well: the watch brings it to the other shapers.
	if err := t.override(ctx, name, &over, rev, log); err != nil {
		httpapi.Unavailable(w, "backend", err)
		return
	}
	t.writeStatus(w, r, c, name)
}

// inPolicy words err about policy name, naming the policy once in each of
// its problems, one after another.
func inPolicy(name string, err error) string {
	var out []string
	for _, e := range unjoin(policies.Named(name, err)) {
		msg := e.Error()
		if !strings.HasPrefix(msg, "policy "+strconv.Quote(name)) {
			msg = "policy " + httpapi.Quote(name) + ": " + msg
		}
		out = append(out, msg)
	}
	return strings.Join(out, "; ")
}

// DeadLetter is one dead-lettered job as GET /v1/dead shows it.
type DeadLetter = deadletter.Letter

// restartPending returns what the policy file, as last loaded, changes of
// policy name that waits for a restart of line.
func (t *table) restartPending(name string, line *served) []string {
	file, ok := t.fileVersion(name)
	if !ok {
		return nil
	}
	return changeStrings(restartChanges(*line.Policy(), file))
}

// removedPolicies lists the policies a reload removed with jobs left,
// sorted by name (never nil: the answer says [] for none).
func (t *table) removedPolicies() []client.RemovedPolicy {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]client.RemovedPolicy, 0, len(t.removed))
	for _, r := range t.removed {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b client.RemovedPolicy) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// noteRemoved keeps (or, with none left, forgets) what a removed policy
// left in its streams; served forgets it once the policy is served again.
func (t *table) noteRemoved(r client.RemovedPolicy, left bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !left {
		delete(t.removed, r.Name)
		return
	}
	if t.removed == nil {
		t.removed = map[string]client.RemovedPolicy{}
	}
	t.removed[r.Name] = r
}
