package shaper

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/shaper/client"
	"github.com/shaper-dev/shaper/shaper/internal/httpapi"
)

// ErrNoPolicyFile is returned by Reload when the Shaper has no
// Config.PolicyFile to read again.
var ErrNoPolicyFile = errors.New("shaper: no policy file to reload")

// ReloadReport says what a reload of the policy file did.
type ReloadReport struct {
	File      string   `json:"file"`
	Added     []string `json:"added"`     // policies now served
	Removed   []string `json:"removed"`   // policies no longer served (their queued jobs stay in JetStream)
	Changed   []string `json:"changed"`   // what changed live: "orders: outflow 20/s → 50/s, retry.attempts 5 → 3"
	Unchanged int      `json:"unchanged"` // policies the reload left as they run (the file did not change them, or only what it cannot apply: see Warnings)
	// Warnings are changes of the file not applied, and why: fields a live
	// override sets (each named), a delivery target that needs a restart.
	Warnings []string `json:"warnings"`
	// RestartPending lists what of the file waits for a restart, policy by
	// policy ("spare: partitions 1 → 4"), as the status shows it.
	RestartPending []string `json:"restart_pending"`
}

type reloadRequest struct {
	reply chan reloadResult
}

type reloadResult struct {
	report ReloadReport
	err    error
}

// Reload reads Config.PolicyFile again and applies it, like nginx on
// SIGHUP: a file with errors changes nothing (the error lists each with its
// line, and each is logged); otherwise new policies are served, removed ones
// stop being served (their queued jobs stay in JetStream for a file that
// brings them back), and changed ones are applied live without losing
// queued jobs. A live override is a patch over the file: the file's
// changes apply to the fields the override leaves out, while the fields it
// sets keep the override's values, and the report warns of each such
// change of the file not applied, and on every reload of each field the
// override still keeps from the file's value. A changed delivery target needs a
// restart. Every change is logged. Reload waits for the running Shaper
// (it is applied between other work of Run), at most until ctx ends.
func (s *Shaper) Reload(ctx context.Context) (ReloadReport, error) {
	if s.cfg.PolicyFile == "" {
		return ReloadReport{}, ErrNoPolicyFile
	}
	req := reloadRequest{reply: make(chan reloadResult, 1)}
	select {
	case s.reloads <- req:
	case <-ctx.Done():
		return ReloadReport{}, ctx.Err()
	}
	select {
	case r := <-req.reply:
		return r.report, r.err
	case <-ctx.Done():
		return ReloadReport{}, ctx.Err()
	}
}

// needsRestart reports whether a change of the policy field applies only
// at a restart: the delivery target and the number of partitions.
func needsRestart(field string) bool {
	return strings.HasPrefix(field, "deliver.") || field == "partitions"
}

// restartChanges lists the changes from running to file that apply only
// at a restart.
func restartChanges(running, file policies.Policy) []policies.Change {
	return slices.DeleteFunc(policies.Diff(running, file), func(c policies.Change) bool { return !needsRestart(c.Field) })
}

// changeStrings writes changes as the status and the reload's answer say
// them: "partitions 4 → 2".
func changeStrings(changes []policies.Change) []string {
	var out []string
	for _, c := range changes {
		out = append(out, c.String())
	}
	return out
}

// restartNeeded warns, on every reload, of each field of file that differs
// from the running policy and applies only at a restart: what the shapers
// run, not what the file said before, so the warning lasts until the
// restart, and ends when the file is put back.
// The status shows them until then too (restartChanges).
func (s *Shaper) restartNeeded(rep *ReloadReport, file, running policies.Policy) {
	deliver, partitions := false, false
	pending := restartChanges(running, file)
	for _, c := range pending {
		partitions = partitions || c.Field == "partitions"
		deliver = deliver || c.Field != "partitions"
	}
	if len(pending) > 0 {
		rep.RestartPending = append(rep.RestartPending, file.Name+": "+strings.Join(changeStrings(pending), ", "))
	}
	if deliver {
		s.warn(rep, file.Name+": the delivery target changed: restart the shaper to apply it")
	}
	if partitions {
		s.warn(rep, file.Name+": the number of partitions changed: restart every shaper to apply it")
	}
}

// reload is Reload's work, run by Run with its context.
func (s *Shaper) reload(ctx context.Context) (ReloadReport, error) {
	rep := ReloadReport{File: s.cfg.PolicyFile, Added: []string{}, Removed: []string{}, Changed: []string{}, Warnings: []string{}, RestartPending: []string{}}
	set, err := policies.Load(s.cfg.PolicyFile)
	if err == nil {
		if err = deliveryLoop(set, s.cfg.SubmitSubject); err != nil {
			err = fmt.Errorf("%s: %w", s.cfg.PolicyFile, err)
		}
	}
	if err != nil {
		for _, e := range unjoin(err) {
			s.log.Error("reload: policy file refused, keeping the policies in use", "err", e)
		}
		return rep, err
	}
	s.policies.mu.Lock()
	old := s.policies.file
	s.policies.file = set
	s.policies.mu.Unlock()
	defer s.cluster.FilesChanged() // once the policies served changed too

	var firsts []<-chan struct{}
	for _, p := range set.Policies() {
		line := s.policies.line(p.Name)
		if line == nil {
			first, err := s.serve(ctx, ctx, p)
			if err != nil {
				rep.Warnings = append(rep.Warnings, fmt.Sprintf("%s: not served: %v", p.Name, err))
				s.log.Error("reload: new policy not served", "policy", p.Name, "err", err)
				continue
			}
			firsts = append(firsts, first)
			rep.Added = append(rep.Added, p.Name)
			s.policies.noteRemoved(client.RemovedPolicy{Name: p.Name}, false) // served again: its jobs are drained
			s.log.Info("reload: policy added", "policy", p.Name, "outflow", p.Outflow.String(), "queue", p.Queue)
			if !s.policies.overrideOf(p.Name).IsEmpty() { // stored before this shaper served it
				if err := s.policies.refresh(ctx, p.Name, "file", s.log); err != nil {
					s.warn(&rep, p.Name+": the live override not applied: "+err.Error())
				}
			}
			continue
		}
		before, _ := old.Lookup(p.Name)
		fileChanges := policies.Diff(before, p)
		s.restartNeeded(&rep, p, *line.Policy())
		if len(fileChanges) == 0 {
			rep.Unchanged++
			// Still said on every reload while the override keeps a field
			// from the file's value: the operator reloads to have the file.
			var held []string
			over := s.policies.overrideOf(p.Name)
			for _, c := range policies.Diff(p, *line.Policy()) {
				if over.Covers(c.Field) {
					held = append(held, fmt.Sprintf("%s %s (the file says %s)", c.Field, c.To, c.From))
				}
			}
			if len(held) > 0 {
				s.warn(&rep, fmt.Sprintf("%s: the live override still sets %s%s", p.Name, strings.Join(held, ", "), toTheFile(p.Name)))
			}
			continue
		}
		over := s.policies.overrideOf(p.Name)
		var held []string
		for _, c := range fileChanges {
			if !needsRestart(c.Field) && over.Covers(c.Field) {
				held = append(held, c.String())
			}
		}
		if len(held) > 0 {
			s.warn(&rep, fmt.Sprintf("%s: %s: not applied, the live override sets %s%s",
				p.Name, strings.Join(held, ", "), pronoun(len(held)), toTheFile(p.Name)))
		}
		live := *line.Policy()
		if err := s.policies.refresh(ctx, p.Name, "file", s.log); err != nil {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("%s: not applied: %v", p.Name, err))
			s.log.Error("reload: policy change not applied", "policy", p.Name, "err", err)
			continue
		}
		if changes := policies.Diff(live, *line.Policy()); len(changes) > 0 {
			rep.Changed = append(rep.Changed, p.Name+": "+joinChanges(changes))
			s.log.Info("reload: policy changed", "policy", p.Name, "change", joinChanges(changes))
		} else {
			rep.Unchanged++ // what the file changed waits for a restart or an override's reset: the warnings say which
		}
	}
	for _, name := range s.policies.names() {
		if _, ok := set.Lookup(name); ok {
			continue
		}
		line := s.policies.remove(name)
		line.stopLease()
		line.stop(ctx, s.log)
		rep.Removed = append(rep.Removed, name)
		queued, qerr := line.queue.Stored(ctx)
		deferred, derr := line.deferQueue.Stored(ctx)
		s.log.Warn("reload: policy removed: no longer admitted or drained; its queued jobs stay in JetStream", "policy", name, "queued", queued, "deferred", deferred)
		s.policies.noteRemoved(client.RemovedPolicy{Name: name, Queued: queued, Deferred: deferred, At: time.Now().UTC()}, queued+deferred > 0)
		if queued+deferred > 0 || qerr != nil || derr != nil {
			// They are not lost, but nothing shows them any more: say so.
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("%s: removed with %s: they stay in JetStream, undelivered, until the policy is served again (put it back in the file and reload)",
				name, jobsLeft(queued, qerr, deferred, derr)))
		}
	}
	for _, first := range firsts {
		<-first
	}
	return rep, nil
}

// jobsLeft says how many jobs a removed policy left: "2 queued jobs",
// "2 queued jobs and 1 deferred job", or that they could not be counted.
func jobsLeft(queued uint64, qerr error, deferred uint64, derr error) string {
	if qerr != nil || derr != nil {
		return "jobs that could not be counted (" + cmp.Or(qerr, derr).Error() + ")"
	}
	n := func(k uint64, what string) string {
		if k == 1 {
			return "1 " + what + " job"
		}
		return fmt.Sprint(k, " ", what, " jobs")
	}
	switch {
	case deferred == 0:
		return n(queued, "queued")
	case queued == 0:
		return n(deferred, "deferred")
	}
	return n(queued, "queued") + " and " + n(deferred, "deferred")
}

// pronoun is "it" for one, "them" for more.
func pronoun(n int) string {
	if n == 1 {
		return "it"
	}
	return "them"
}

// warn adds w to the warnings of rep, and logs it.
func (s *Shaper) warn(rep *ReloadReport, w string) {
	rep.Warnings = append(rep.Warnings, w)
	s.log.Warn("reload: " + w)
}

// unjoin returns the errors err joins (errors.Join), or err alone.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// handleReload serves POST /v1/reload: 200 with the report, 400 with the
// file's errors (nothing changed).
func (s *Shaper) handleReload(w http.ResponseWriter, r *http.Request) {
	rep, err := s.Reload(r.Context())
	switch {
	case errors.Is(err, ErrNoPolicyFile):
		httpapi.Error(w, http.StatusConflict, "this shaper was started without a policy file: nothing to reload")
	case err != nil:
		var lines []string
		for _, e := range unjoin(err) { // in the file's order, as the parser sorted them
			lines = append(lines, e.Error())
		}
		httpapi.WriteProblem(w, httpapi.Problem{Status: http.StatusBadRequest, Detail: "policy file refused, the policies in use are kept: " + strings.Join(lines, "; ")}, 0)
	default:
		httpapi.WriteJSON(w, http.StatusOK, rep)
	}
}

// toTheFile says how to drop policy name's live override, for a reload's
// warnings: from the command line and over HTTP.
func toTheFile(name string) string {
	return fmt.Sprintf(" (shaper policies reset %s, or DELETE /v1/policies/%s/override, to use the file)", name, name)
}
