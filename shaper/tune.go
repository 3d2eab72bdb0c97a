package shaper

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/policies"
)

// Live tuning. PUT /v1/policies/{name} changes a policy while the shaper
// runs; the change is kept as an override in the SHAPER_POLICIES key-value
// bucket, which every shaper on the cluster watches and applies, and which
// outlives restarts. DELETE /v1/policies/{name}/override returns the policy
// to what the policy file says.
//
// What can change: outflow and total (from each key's next slot), queue (a
// larger size at once; a smaller one is enforced by admission, since
// shrinking the stream's limit over live jobs would purge them), overflow,
// retry and admit. Where jobs are delivered cannot change while running.
const policyBucket = "SHAPER_POLICIES"

func (s *Shaper) openOverrides(ctx context.Context) (jetstream.KeyValue, error) {
	kv, err := s.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      policyBucket,
		Description: "live policy overrides",
		History:     5,
		Replicas:    s.cfg.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("shaper: policy overrides: %w", err)
	}
	return kv, nil
}

// applyOverrides applies the overrides stored now, then keeps applying
// changes until ctx ends.
func (s *Shaper) watchOverrides(ctx context.Context, kv jetstream.KeyValue) (func(), error) {
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("shaper: watch policy overrides: %w", err)
	}
	apply := func(e jetstream.KeyValueEntry) {
		name := e.Key()
		if s.runtime(name) == nil {
			return // an override of a policy this shaper's file does not have
		}
		var p policies.Policy
		if e.Operation() == jetstream.KeyValuePut {
			if err := json.Unmarshal(e.Value(), &p); err != nil {
				s.log.Error("bad policy override ignored", "policy", name, "err", err)
				return
			}
		} else {
			var ok bool
			if p, ok = s.cfg.Policies.Lookup(name); !ok {
				return
			}
		}
		if err := s.applyPolicy(ctx, p, e.Operation() == jetstream.KeyValuePut); err != nil {
			s.log.Error("policy override not applied", "policy", name, "err", err)
		}
	}
	// The initial values: applied before the shaper admits anything.
	for e := range w.Updates() {
		if e == nil {
			break
		}
		apply(e)
	}
	return func() {
		defer w.Stop()
		for e := range w.Updates() {
			if e != nil {
				apply(e)
			}
		}
	}, nil
}

// applyPolicy makes p the live version of its policy on this shaper.
func (s *Shaper) applyPolicy(ctx context.Context, p policies.Policy, override bool) error {
	rt := s.runtime(p.Name)
	if rt == nil {
		return fmt.Errorf("unknown policy %q", p.Name)
	}
	old := rt.pol.Load()
	p, err := s.normalize(rt, p)
	if err != nil {
		return err
	}
	if err := rt.q.Resize(ctx, p.Queue); err != nil {
		return err
	}
	if err := rt.deferQ.Resize(ctx, deferredSize(p)); err != nil {
		return err
	}
	if !reflect.DeepEqual(old.Admit, p.Admit) {
		if err := s.setAdmission(rt, p); err != nil {
			return err
		}
	}
	rt.pol.Store(&p)
	rt.override.Store(override)
	rt.d.SetPace(paceOf(p))
	rt.deferD.SetPace(paceOf(p))
	s.mu.Lock()
	s.set, _ = s.set.With(p)
	s.mu.Unlock()
	if !reflect.DeepEqual(*old, p) {
		s.log.Info("policy changed", "policy", p.Name, "outflow", p.Outflow.String(), "queue", p.Queue,
			"overflow", p.Overflow, "total", p.Total.String(), "override", override)
	}
	return nil
}

// handlePolicyPut serves PUT /v1/policies/{name}: the body is a JSON object
// with the fields to change, as GET shows them ({"outflow": "10/s",
// "queue": 50}). Bad input changes nothing and is answered 400.
func (s *Shaper) handlePolicyPut(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	rt := s.runtime(name)
	if rt == nil {
		writeOutcome(w, failed(http.StatusNotFound, "unknown policy "+quote(name)))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64<<10))
	if err != nil {
		writeOutcome(w, failed(http.StatusRequestEntityTooLarge, "policy body: "+err.Error()))
		return
	}
	p := rt.pol.Load().Clone()
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		writeOutcome(w, failed(http.StatusBadRequest, "policy "+quote(name)+": "+err.Error()))
		return
	}
	if p.Name != name {
		writeOutcome(w, failed(http.StatusBadRequest, "policy "+quote(name)+": name cannot change"))
		return
	}
	p.Line = 0
	if p, err = s.normalize(rt, p); err != nil {
		writeOutcome(w, failed(http.StatusBadRequest, "policy "+quote(name)+": "+err.Error()))
		return
	}
	b, _ := json.Marshal(p)
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	if _, err := s.overrides.Put(ctx, name, b); err != nil {
		writeOutcome(w, unavailable("backend", err))
		return
	}
	// Apply here at once as well: the watch brings it to the other shapers.
	if err := s.applyPolicy(ctx, p, true); err != nil {
		writeOutcome(w, unavailable("backend", err))
		return
	}
	st, _ := s.policyStatus(name)
	writeJSON(w, http.StatusOK, st)
}

// handleOverrideDelete serves DELETE /v1/policies/{name}/override.
func (s *Shaper) handleOverrideDelete(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	file, ok := s.cfg.Policies.Lookup(name)
	if !ok || s.runtime(name) == nil {
		writeOutcome(w, failed(http.StatusNotFound, "unknown policy "+quote(name)))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	if err := s.overrides.Delete(ctx, name); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		writeOutcome(w, unavailable("backend", err))
		return
	}
	if err := s.applyPolicy(ctx, file, false); err != nil {
		writeOutcome(w, unavailable("backend", err))
		return
	}
	st, _ := s.policyStatus(name)
	writeJSON(w, http.StatusOK, st)
}

// normalize checks that p may replace rt's live policy and returns it with
// its defaults filled in, validated as the policy file would be.
func (s *Shaper) normalize(rt *runtime, p policies.Policy) (policies.Policy, error) {
	if !reflect.DeepEqual(rt.pol.Load().Deliver, p.Deliver) {
		return p, errors.New("deliver cannot change while running: edit the policy file and restart")
	}
	s.mu.RLock()
	next, err := s.set.With(p)
	s.mu.RUnlock()
	if err != nil {
		return p, err
	}
	p, _ = next.Lookup(p.Name)
	return p, nil
}
