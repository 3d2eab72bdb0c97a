package integration

import (
	"testing"
	"time"
)

// answerSlack is what an answer may be off beyond one slot: the hand-over
// to the webhook and HTTP, on a busy machine.
const answerSlack = 150 * time.Millisecond

// TestPartitionedAnswers checks what shapers draining a policy in 4
// partitions promise producers against what a real consumer then sees:
// every 202's eta_ms against when the job reached the webhook, and every
// 429's Retry-After against when the same shaper next accepted a job of the
// key — asked of every shaper, the partition's drainer and the others —
// in a steady state, across a graceful hand-over and across a crash.
func TestPartitionedAnswers(t *testing.T) {
	needBinaries(t)
	t.Run("steady", testAnswersSteady)
	t.Run("handover", testAnswersHandOver)
	t.Run("crash", testAnswersCrash)
}

// testAnswersSteady: three shapers, each draining one or two partitions,
// waves of two jobs per key 2 s apart (the first finds the keys idle, the
// others find them with a last attempt, jobs held after delivery and the
// cap reserved), then a 429 of a full key from every shaper.
func testAnswersSteady(t *testing.T) {
	r := startPartRig(t, 3, 3, 3)
	r.waitShared()
	var etas []answerOf
	for w := range 3 {
		etas = append(etas, r.wave(2, "eta")...)
		if w < 2 {
			time.Sleep(2 * time.Second)
		}
	}
	r.arrivals(etas)
	holding, passive := report(t, etas)
	within(t, holding, partRigSlot+answerSlack)
	within(t, passive, partRigSlot+answerSlack)
	time.Sleep(2 * time.Second) // every key idle again
	ras := r.retryAfters("retry", func(i int) int { return i })
	holding, passive = report(t, ras)
	within(t, holding, partRigSlot+answerSlack)
	within(t, passive, partRigSlot+answerSlack)
}

// testAnswersHandOver: two shapers, a third joins (partitions move to it
// gracefully), then one of the first leaves with SIGTERM; waves of jobs
// are submitted just before and just after each move.
func testAnswersHandOver(t *testing.T) {
	r := startPartRig(t, 2, 3, 3)
	r.waitShared()
	var all []answerOf
	all = append(all, r.wave(2, "before-join")...)
	r.startShaperAt(2)
	all = append(all, r.wave(2, "while-join")...)
	r.waitShared()
	all = append(all, r.wave(1, "after-join")...)
	time.Sleep(3 * time.Second) // drained
	all = append(all, r.wave(2, "before-leave")...)
	r.terminate(0)
	all = append(all, r.wave(2, "while-leave")...)
	r.waitShared()
	all = append(all, r.wave(1, "after-leave")...)
	r.arrivals(all)
	for _, kind := range []string{"before-join", "while-join", "after-join", "before-leave", "while-leave", "after-leave"} {
		holding, passive := report(t, ofKind(all, kind))
		within(t, holding, partRigSlot+answerSlack)
		within(t, passive, partRigSlot+answerSlack)
	}
}

// testAnswersCrash: three shapers; a wave of jobs, then kill -9 of a
// shaper draining a partition, a wave while its partitions have no
// drainer, and one once the others drain them.
func testAnswersCrash(t *testing.T) {
	r := startPartRig(t, 3, 3, 3)
	holders := r.waitShared()
	victim := holders[0]
	var all []answerOf
	all = append(all, r.wave(2, "before-crash")...)
	r.procs[victim].kill()
	killedAt := time.Now()
	all = append(all, r.wave(1, "while-crash")...)
	r.waitShared()
	t.Logf("the others drain every partition %v after the kill", time.Since(killedAt).Round(time.Millisecond))
	all = append(all, r.wave(2, "after-crash")...)
	r.arrivals(all)
	for _, kind := range []string{"before-crash", "while-crash", "after-crash"} {
		holding, passive := report(t, ofKind(all, kind))
		within(t, holding, partRigSlot+answerSlack)
		within(t, passive, partRigSlot+answerSlack)
	}
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
