package integration

import (
	"slices"
	"testing"
	"time"
)

// answerSlack is what an answer may be off beyond one slot: the hand-over
// to the webhook and HTTP, and the stalls of a loaded 2-core machine.
const answerSlack = 250 * time.Millisecond

// answerTolerance is how far an answer may be off while its partition
// has a drainer: one slot of a key, and the slack.
const answerTolerance = partRigSlot + answerSlack

// moveTolerance is how early an answer from a passive drainer (a
// partition whose holder was just killed) may come true: one round of the
// partition's cap (4 keys, 500 ms apart), since it knows neither the
// slots the cap reserved nor the jobs delivered and not yet freed, one
// slot of the cap, and the slack. A graceful hand-over keeps the cap's
// order (drain.Drainer.CapOrder): answers given across it are held to
// answerTolerance.
const moveTolerance = 4*partRigSlot/2 + partRigSlot/2 + answerSlack

// TestPartitionedAnswers checks what shapers draining a policy in 4
// partitions promise producers against what a real consumer then sees:
// every 202's eta_ms against when the job reached the webhook, and every
// 429's Retry-After against when the same shaper next accepted a job of the
// key — asked of every shaper, the partition's drainer and the others
// (which ask the drainer: package answers) — in a steady state, across
// graceful hand-overs (a shaper joins, one leaves) and across a crash.
// Every answer is logged with how far off it came true, and the spread of
// each kind (SPREAD lines); docs/scaling.md quotes them.
func TestPartitionedAnswers(t *testing.T) {
	needBinaries(t)
	t.Run("steady", testAnswersSteady)
	t.Run("handover", testAnswersHandOver)
	t.Run("crash", testAnswersCrash)
}

// testAnswersSteady: three shapers, each draining one or two partitions,
// waves of two jobs per key 3 s apart (the first finds the keys idle, the
// others find them with a last attempt, jobs held after delivery and the
// cap's slots reserved), then a 429 of a full key from every shaper.
func testAnswersSteady(t *testing.T) {
	r := startPartRig(t, 3, 3, 3)
	r.waitShared()
	var etas []answerOf
	for w := range 3 {
		etas = append(etas, r.wave(2, "eta", 0, 1, 2)...)
		if w < 2 {
			time.Sleep(3 * time.Second)
		}
	}
	r.arrivals(etas)
	report(t, etas)
	within(t, etas, answerTolerance)
	time.Sleep(3 * time.Second) // every key idle again
	ras := r.refusals("429", 0, 1, 2)
	r.awaitRoom(ras)()
	report(t, ras)
	within(t, ras, answerTolerance)
	r.checkOrder()
}

// testAnswersHandOver: two shapers, a third joins (partitions move to it
// gracefully), then one of the first leaves with SIGTERM; answers are
// asked just before, while and just after each move: waves of jobs, and
// 429s given before the leave, whose keys get room after it. Answers
// given before, while and after the partitions move come true within a
// slot: the next holder of a partition keeps each key's pace and the
// cap's order, and a hand-over's pause is shorter than a slot.
func testAnswersHandOver(t *testing.T) {
	r := startPartRig(t, 2, 3, 4)
	r.waitShared()
	var etas []answerOf
	etas = append(etas, r.wave(2, "before-join", 0, 1, 2, 3)...)
	r.startShaperAt(2)
	etas = append(etas, r.wave(2, "while-join", 0, 1, 2, 3)...)
	r.waitShared()
	etas = append(etas, r.wave(1, "after-join", 0, 1, 2, 3)...)
	r.arrivals(etas)
	time.Sleep(2 * time.Second) // the slots held after delivery are freed
	ras := r.refusals("429-before-leave", 1, 2)
	room := r.awaitRoom(ras)
	etas = append(etas, r.wave(2, "before-leave", 2, 3)...)
	r.terminate(0)
	etas = append(etas, r.wave(2, "while-leave", 2, 3)...)
	r.waitShared()
	etas = append(etas, r.wave(1, "after-leave", 2, 3)...)
	room()
	r.arrivals(etas)
	for _, kind := range []string{"before-join", "while-join", "after-join", "before-leave", "while-leave", "after-leave"} {
		answers := ofKind(etas, kind)
		report(t, answers)
		within(t, answers, answerTolerance)
	}
	report(t, ras)
	within(t, ras, answerTolerance)
	r.checkOrder()
}

// testAnswersCrash: three shapers; 429s and a wave of jobs, then kill -9
// of a shaper draining a partition, a wave while its partitions have no
// drainer, and one (and 429s) once the others drain them.
//
// What holds: an answer about a partition whose drainer is killed comes
// true late by at most the time until another shaper drains it (the lease
// TTL and the take-over, "covered" below) and one slot more (the job the
// killed shaper had in flight, or delivered and still held, is delivered
// again and takes a slot; a 429's room, another slot for the hold after
// that delivery), never early beyond the tolerance; an answer
// given while the partition has no drainer comes from a passive drainer
// that does not know when the lease will be taken over, so it is late by
// as much, nor the keys' places under the cap, nor which of their jobs
// were delivered and wait to be freed, so it may also be early by up to a
// round of the cap; the new holder's answers are within one slot again,
// like every answer about the partitions whose drainer lives.
func testAnswersCrash(t *testing.T) {
	r := startPartRig(t, 3, 3, 4)
	holders, _ := r.waitShared()
	victim := holders[0]
	var survivors []int
	for _, i := range r.live() {
		if i != victim {
			survivors = append(survivors, i)
		}
	}
	var orphans []int
	for p, h := range holders {
		if h == victim {
			orphans = append(orphans, p)
		}
	}
	ras := r.refusals("429-before-crash", survivors...)
	room := r.awaitRoom(ras)
	etas := r.wave(2, "before-crash", 2, 3)
	r.procs[victim].kill()
	killedAt := time.Now()
	etas = append(etas, r.wave(1, "while-crash", 2, 3)...)
	_, coveredAt := r.waitShared()
	covered := coveredAt.Sub(killedAt)
	t.Logf("killed shaper %d (partitions %v): the others drain every partition %v after the kill", victim, orphans, covered.Round(time.Millisecond))
	etas = append(etas, r.wave(2, "after-crash", 2, 3)...)
	room()
	after := r.refusals("429-after-crash", survivors...)
	r.awaitRoom(after)()
	r.arrivals(etas)
	// A job the killed shaper delivered and had not freed is delivered
	// again, in a slot of its key, and holds its key's room for a slot
	// more (the hold after a delivery): a 429's room comes that much later.
	cases := []struct {
		answers     []answerOf
		early, late time.Duration
	}{
		{ras, answerTolerance, covered + partRigSlot + answerTolerance},
		{ofKind(etas, "before-crash"), answerTolerance, covered + answerTolerance},
		// From a passive drainer, which counts the jobs the killed shaper
		// delivered and had not freed yet as waiting, and knows nothing of
		// the keys' places under the cap: up to a round early.
		{ofKind(etas, "while-crash"), moveTolerance, covered + answerTolerance},
	}
	for _, c := range cases {
		orphaned, kept := byPartition(c.answers, orphans)
		report(t, orphaned)
		report(t, kept)
		between(t, orphaned, -c.early, c.late)
		within(t, kept, answerTolerance)
	}
	for _, answers := range [][]answerOf{ofKind(etas, "after-crash"), after} {
		report(t, answers)
		within(t, answers, answerTolerance)
	}
	r.checkOrder()
}

// byPartition splits answers into those about a key of parts and the
// others, tagging the first.
func byPartition(answers []answerOf, parts []int) (in, out []answerOf) {
	for _, a := range answers {
		if slices.Contains(parts, a.part) {
			a.kind += "/orphaned"
			in = append(in, a)
		} else {
			out = append(out, a)
		}
	}
	return in, out
}

func ofKind(answers []answerOf, kind string) []answerOf {
	var out []answerOf
	for _, a := range answers {
		if a.kind == kind {
			out = append(out, a)
		}
	}
	return out
}
