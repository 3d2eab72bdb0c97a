package drain

import "github.com/shaper-dev/shaper/queue"

// The jobs Watch reported whole (queue.Notice.Job), kept for the next reads
// of an active Drainer's keys: a head found here costs no request to the
// queue. Only a job reported while the Drainer is active is kept, and only
// until it becomes inactive or finds itself past its lease (HoldUntil):
// while it holds the drain, nobody else removes its keys' jobs, so a job
// kept is a job stored. A key that reads its heads late (a far slot, see
// headLead) keeps only a job it reads at once (its slot is near, and no
// other job of it waits), so that a key waiting for its slot holds no job;
// past Config.WatchedBytes the jobs reported are not kept, and read as
// before.

// DefaultWatchedBytes bounds the jobs an active Drainer, or the partitions
// of a Group together, keep from Watch by default: at 100-byte payloads,
// about 28,000 jobs.
const DefaultWatchedBytes = 8 << 20

// watchedJobs are the jobs kept, by sequence. It is guarded by the
// Drainer's mu.
type watchedJobs struct {
	jobs  map[uint64]*queue.Msg
	bytes int
}

// keep adds m unless that would pass limit bytes.
func (w *watchedJobs) keep(m *queue.Msg, limit int) {
	n := jobBytes(m)
	if w.bytes+n > limit {
		return
	}
	if w.jobs == nil {
		w.jobs = make(map[uint64]*queue.Msg)
	}
	w.jobs[m.Seq] = m
	w.bytes += n
}

// take returns the job at seq and forgets it; nil when it is not kept.
func (w *watchedJobs) take(seq uint64) *queue.Msg {
	m, ok := w.jobs[seq]
	if !ok {
		return nil
	}
	delete(w.jobs, seq)
	w.bytes -= jobBytes(m)
	return m
}

// clear forgets every job kept.
func (w *watchedJobs) clear() {
	clear(w.jobs)
	w.bytes = 0
}

// jobBytes estimates what keeping m costs: its payload, its id, key and
// headers, and the Msg itself.
func jobBytes(m *queue.Msg) int {
	n := 160 + len(m.Payload) + len(m.ID) + len(m.Key) + len(m.Token) + len(m.Undecodable)
	for name, values := range m.Header {
		n += 48 + len(name)
		for _, v := range values {
			n += 16 + len(v)
		}
	}
	return n
}

// keepWatched keeps the job n reported whole, for key k, when the Drainer
// delivers and k reads it soon: k reads its heads as soon as the one
// before is delivered, or n is the job k reads next and k's slot comes
// within headLead (a key idle until now reads it at once). d.mu must be
// held.
func (d *Drainer) keepWatched(k *keyState, n queue.Notice) {
	if !d.active || d.cfg.WatchedBytes < 0 || d.watched.bytes >= d.cfg.WatchedBytes {
		return
	}
	if d.readsLate(k) && (k.head.msg != nil || k.toReadCount() > 1 || k.next.time().After(d.clock.Now().Add(headLead))) {
		return // a key waiting for a far slot holds no job
	}
	if m := n.Job(); m != nil {
		d.watched.keep(m, d.cfg.WatchedBytes)
	}
}

// unwatchBelow forgets the jobs kept of k below from: its next read,
// planned from there, drops their sequences (readPlan). d.mu must be held.
func (d *Drainer) unwatchBelow(k *keyState, from uint64) {
	if len(d.watched.jobs) == 0 {
		return
	}
	for _, seq := range k.seqs {
		if seq >= from {
			return
		}
		d.watched.take(seq)
	}
}

// takeWatched returns the job kept at the first of exact, the sequences
// k's head is read at, forgetting it; nil when none is kept, or when the
// job kept there is another key's (a stream made again under the same
// name numbers its jobs from 1 again). d.mu must be held.
func (d *Drainer) takeWatched(k *keyState, exact []uint64) *queue.Msg {
	if len(exact) == 0 || len(d.watched.jobs) == 0 {
		return nil
	}
	if m := d.watched.take(exact[0]); m != nil && m.Token == k.token {
		return m
	}
	return nil
}
