package drain

import (
	"fmt"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/shaper-dev/shaper/queue"
)

// keyState's bookkeeping, alone: no queue, no clock, no lock.

// TestKeyNoticeAndRemoved steps one key through notices and removals,
// including a removal that comes before its notice (a job removed by a
// drainer whose watch lags).
func TestKeyNoticeAndRemoved(t *testing.T) {
	type op struct {
		name        string
		notice      uint64 // or
		remove      uint64
		wantNews    bool
		wantCounted bool
		wantDepth   int64
		wantSeqs    []uint64
		wantEarly   int
	}
	steps := []op{
		{name: "first notice", notice: 5, wantNews: true, wantCounted: true, wantDepth: 1, wantSeqs: []uint64{5}},
		{name: "the same notice again", notice: 5, wantDepth: 1, wantSeqs: []uint64{5}},
		{name: "an older notice (a watch restarted)", notice: 3, wantDepth: 1, wantSeqs: []uint64{5}},
		{name: "removed before its notice", remove: 7, wantDepth: 1, wantSeqs: []uint64{5}, wantEarly: 1},
		{name: "next notice", notice: 6, wantNews: true, wantCounted: true, wantDepth: 2, wantSeqs: []uint64{5, 6}, wantEarly: 1},
		{name: "the early one's notice does not count", notice: 7, wantNews: true, wantDepth: 2, wantSeqs: []uint64{5, 6, 7}},
		{name: "removed after its notice", remove: 5, wantCounted: true, wantDepth: 1, wantSeqs: []uint64{5, 6, 7}},
	}
	k := newKeyState("k", "k")
	for _, st := range steps {
		var news, counted bool
		if st.notice != 0 {
			news, counted = k.notice(st.notice)
		} else {
			news, counted = st.wantNews, k.removed(st.remove)
		}
		if news != st.wantNews || counted != st.wantCounted || k.depth != st.wantDepth || !slices.Equal(k.seqs, st.wantSeqs) || len(k.early) != st.wantEarly {
			t.Errorf("%s: news %v, counted %v, depth %d, seqs %v, early %v; want %v, %v, %d, %v, %d early",
				st.name, news, counted, k.depth, k.seqs, k.early, st.wantNews, st.wantCounted, st.wantDepth, st.wantSeqs, st.wantEarly)
		}
	}
	if k.idle() {
		t.Errorf("idle() = true with depth %d", k.depth)
	}
}

// Notices below the read position are counted but not read again.
func TestKeyNoticeBelowFrom(t *testing.T) {
	k := newKeyState("k", "k")
	k.from = 10
	k.notice(8)
	k.notice(12)
	if k.depth != 2 || !slices.Equal(k.seqs, []uint64{12}) {
		t.Errorf("depth %d, seqs %v; want 2, [12]", k.depth, k.seqs)
	}
}

// A delivered job keeps its slot (pend) until freed; reads go on after the
// head.
func TestKeyDeliveredAndFreed(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	hold := 100 * time.Millisecond
	k := newKeyState("k", "k")
	for seq := uint64(1); seq <= 3; seq++ {
		k.notice(seq)
	}
	k.head = tried{msg: &queue.Msg{Seq: 1}, failures: 2, history: []string{"x"}}
	k.delivered(headJob, at(3).Add(hold))
	if k.head.msg != nil || k.head.failures != 0 || k.head.history != nil || k.from != 2 || !slices.Equal(k.pend, []uint64{1}) ||
		!k.pendingAt.time().Equal(at(103)) {
		t.Errorf("after delivered: head %+v, from %d, pend %v, pendingAt %v", k.head, k.from, k.pend, k.pendingAt.time().Sub(t0))
	}
	k.head = tried{msg: &queue.Msg{Seq: 2}}
	k.delivered(headJob, at(250).Add(hold))
	if !slices.Equal(k.pend, []uint64{1, 2}) || !k.pendingAt.time().Equal(at(350)) {
		t.Errorf("after a second delivery: pend %v, pendingAt %v; want [1 2], 350ms", k.pend, k.pendingAt.time().Sub(t0))
	}
	if n := k.freed(2); n != 2 || k.depth != 1 || len(k.pend) != 0 {
		t.Errorf("freed(2) = %d, depth %d, pend %v; want 2, 1, []", n, k.depth, k.pend)
	}
	k.head = tried{msg: &queue.Msg{Seq: 3}, deadReason: ReasonDeadline}
	if !k.buried(headJob) || k.depth != 0 || k.from != 4 || k.head.deadReason != "" || k.head.msg != nil {
		t.Errorf("after buried(head): depth %d, from %d, head %+v", k.depth, k.from, k.head)
	}
}

func TestKeyReadPlan(t *testing.T) {
	k := newKeyState("k", "k")
	k.seqs = []uint64{3, 5, 6, 7, 9, 11}
	if got := k.readPlan(nil, 6); !slices.Equal(got, []uint64{6, 7, 9, 11}) || !slices.Equal(k.seqs, []uint64{6, 7, 9, 11}) {
		t.Errorf("readPlan(6) = %v, seqs %v; want the first %d from 6 on, and seqs trimmed", got, k.seqs, readAhead)
	}
	k.seqs = append(k.seqs, 12, 13)
	if got := k.readPlan(nil, 6); len(got) != readAhead {
		t.Errorf("readPlan reads %d sequences, want at most %d", len(got), readAhead)
	}
	k.forget([]uint64{7, 9})
	if !slices.Equal(k.seqs, []uint64{6, 11, 12, 13}) {
		t.Errorf("after forget(7, 9): seqs %v", k.seqs)
	}
	if got := k.readPlan(nil, 20); len(got) != 0 || len(k.seqs) != 0 {
		t.Errorf("readPlan past every sequence = %v, seqs %v; want none", got, k.seqs)
	}
}

func TestCountAbove(t *testing.T) {
	tests := []struct {
		seqs    []uint64
		highest uint64
		want    int
	}{
		{nil, 0, 0},
		{[]uint64{1, 2, 3}, 3, 0},
		{[]uint64{1, 2, 3}, 0, 3},
		{[]uint64{1, 5, 9}, 4, 2},
	}
	for _, tt := range tests {
		if got := countAbove(tt.seqs, tt.highest); got != tt.want {
			t.Errorf("countAbove(%v, %d) = %d, want %d", tt.seqs, tt.highest, got, tt.want)
		}
	}
}

func TestTrimOldest(t *testing.T) {
	tests := []struct {
		seqs    []uint64
		highest uint64
		keep    int
		want    []uint64
	}{
		{[]uint64{1, 2, 3, 4}, 4, 2, []uint64{3, 4}},
		{[]uint64{1, 2, 3, 7, 9}, 4, 1, []uint64{3, 7, 9}}, // 7 and 9 came after the count
		{[]uint64{1, 2, 3}, 3, 5, []uint64{1, 2, 3}},       // more counted than known: keep all
		{[]uint64{5, 6}, 4, 0, []uint64{5, 6}},             // all after the count
		{[]uint64{1, 2, 3, 4}, 4, 0, []uint64{}},
	}
	for _, tt := range tests {
		got := slices.Clone(tt.seqs)
		trimOldest(&got, tt.highest, tt.keep)
		if !slices.Equal(got, tt.want) {
			t.Errorf("trimOldest(%v, %d, %d) = %v, want %v", tt.seqs, tt.highest, tt.keep, got, tt.want)
		}
	}
}

// A passive drainer's key takes its depth from the queue's count, plus the
// jobs reported after the count was asked for.
func TestKeyResync(t *testing.T) {
	k := newKeyState("k", "k")
	for _, seq := range []uint64{1, 2, 3, 7, 9} {
		k.notice(seq)
	}
	k.resync(1, 4) // of 1, 2, 3 one is left; 7 and 9 came after the count
	if k.depth != 3 || !slices.Equal(k.seqs, []uint64{3, 7, 9}) {
		t.Errorf("resync(1, 4): depth %d, seqs %v; want 3, [3 7 9]", k.depth, k.seqs)
	}
}

func TestKeyHeadAt(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	interval := 100 * time.Millisecond
	tests := []struct {
		name  string
		next  time.Time
		since time.Time // when the read fell due (zero: at now)
		now   time.Time
		want  time.Time
	}{
		{"ahead of its slot", t0.Add(50 * time.Millisecond), time.Time{}, t0, t0.Add(50 * time.Millisecond)},
		{"behind by less than an interval: its slot", t0, time.Time{}, t0.Add(80 * time.Millisecond), t0},
		{"idle for longer: pacing lapsed, at once", t0, time.Time{}, t0.Add(150 * time.Millisecond), t0.Add(150 * time.Millisecond)},
		{"never delivered", time.Time{}, time.Time{}, t0, t0},
		// A read that waited for a worker: due since it fell due, so the key
		// keeps its place before the keys that fell due after it.
		{"never delivered, read late: since the read fell due", time.Time{}, t0, t0.Add(3 * time.Second), t0},
		{"idle, read late: since the read fell due", t0, t0.Add(time.Second), t0.Add(3 * time.Second), t0.Add(time.Second)},
		{"idle, read fell due before the slot: the slot", t0, t0.Add(-time.Second), t0.Add(3 * time.Second), t0},
	}
	for _, tt := range tests {
		k := newKeyState("k", "k")
		k.next, k.wake = instantOf(tt.next), true
		since := tt.since
		if since.IsZero() {
			since = tt.now
		}
		k.headAt(&queue.Msg{Seq: 1}, since, tt.now, interval)
		due, ok := k.attemptAt()
		if !ok || !due.Equal(tt.want) || k.wake || !k.fresh() {
			t.Errorf("%s: attemptAt() = %v, %v, wake %v, fresh %v; want %v, true, false, true", tt.name, due.Sub(t0), ok, k.wake, k.fresh(), tt.want.Sub(t0))
		}
	}
}

func TestKeyNextEvent(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	tests := []struct {
		name   string
		k      keyState
		want   time.Time
		wantOK bool
	}{
		{"idle", keyState{}, time.Time{}, false},
		{"head", keyState{head: tried{msg: &queue.Msg{}}, next: instantOf(at(30))}, at(30), true},
		{"slot to free first", keyState{head: tried{msg: &queue.Msg{}}, next: instantOf(at(30)), pend: []uint64{1}, pendingAt: instantOf(at(20))}, at(20), true},
		{"retry after its slot", keyState{aside: []tried{{msg: &queue.Msg{}, retrying: true, due: at(50)}}, next: instantOf(at(30))}, at(50), true},
		{"retry waits for the slot", keyState{head: tried{msg: &queue.Msg{}, retrying: true, due: at(10)}, next: instantOf(at(30))}, at(30), true},
		{"dead letter before the slot", keyState{head: tried{msg: &queue.Msg{}}, next: instantOf(at(30)),
			aside: []tried{{msg: &queue.Msg{}, retrying: true, deadReason: ReasonDelivery, due: at(5)}}}, at(5), true},
		{"fetch", keyState{fetch: true, fetchAt: instantOf(at(5)), pend: []uint64{1}, pendingAt: instantOf(at(20))}, at(5), true},
	}
	for _, tt := range tests {
		if got, ok := tt.k.nextEvent(tt.k.fetchAt.time()); !got.Equal(tt.want) || ok != tt.wantOK {
			t.Errorf("%s: nextEvent() = %v, %v; want %v, %v", tt.name, got.Sub(t0), ok, tt.want.Sub(t0), tt.wantOK)
		}
	}
}

// status answers producers: how many jobs and when a slot frees (RoomIn);
// start says when the key's first fresh job starts. At named instants.
func TestKeyStatus(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	hold := ms(100)
	d := &Drainer{pace: Pace{Interval: ms(100)}, hold: hold}
	tests := []struct {
		name  string
		k     keyState
		now   time.Time
		want  KeyStatus
		start time.Duration
	}{
		{"delivered, slot held", keyState{depth: 3, notified: 9, pend: []uint64{7}, pendingAt: instantOf(at(100)), next: instantOf(at(100))}, at(40),
			KeyStatus{Queued: 3, Waiting: 2, Seen: 9, RoomIn: ms(60)}, ms(60)},
		{"delivered, its slot being freed now", keyState{depth: 2, notified: 9, pend: []uint64{7}, pendingAt: instantOf(at(30)), head: tried{msg: &queue.Msg{}}, next: instantOf(at(100))}, at(40),
			KeyStatus{Queued: 2, Waiting: 1, Seen: 9, Freeing: 1, RoomIn: ms(160)}, ms(60)},
		{"head read ahead of its slot", keyState{depth: 2, head: tried{msg: &queue.Msg{}}, next: instantOf(at(100))}, at(40),
			KeyStatus{Queued: 2, Waiting: 2, RoomIn: ms(160)}, ms(60)},
		{"head past its slot", keyState{depth: 2, head: tried{msg: &queue.Msg{}}, next: instantOf(at(10))}, at(40),
			KeyStatus{Queued: 2, Waiting: 2, RoomIn: ms(100)}, 0},
		{"failed head retried after its backoff, then the fresh job", keyState{depth: 2, head: tried{msg: &queue.Msg{}, retrying: true, due: at(90)}, next: instantOf(at(10))}, at(40),
			KeyStatus{Queued: 2, Waiting: 2, RoomIn: ms(150), Retrying: 1}, ms(150)},
		{"busy reading", keyState{depth: 1, busy: true}, at(40),
			KeyStatus{Queued: 1, Waiting: 1, RoomIn: hold}, 0},
		{"idle, paced", keyState{next: instantOf(at(70))}, at(40),
			KeyStatus{RoomIn: ms(130)}, ms(30)},
		{"idle, pacing lapsed", keyState{next: instantOf(at(10))}, at(40),
			KeyStatus{RoomIn: hold}, 0},
	}
	for _, tt := range tests {
		if got := d.status(&tt.k, tt.now); got != tt.want {
			t.Errorf("%s: status(%v) = %+v, want %+v", tt.name, tt.now.Sub(t0), got, tt.want)
		}
		if got := d.start(&tt.k, 1, tt.now).Sub(tt.now); got != tt.start {
			t.Errorf("%s: first fresh job starts in %v, want %v", tt.name, got, tt.start)
		}
	}
}

// The heap orders keys by when they next need the scheduler, and tracks
// each key's place in it.
func TestKeyHeap(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var h keyHeap
	keys := make([]*keyState, 5)
	for i := range keys {
		keys[i] = newKeyState(fmt.Sprint(i), fmt.Sprint(i))
		h.place(keys[i], t0.Add(time.Duration(5-i)*time.Second))
	}
	h.place(keys[0], t0) // moved to the front
	h.drop(keys[4])
	h.drop(keys[4]) // not in it: nothing
	var order []string
	for h.Len() > 0 {
		k := h[0]
		h.drop(k)
		order = append(order, k.token)
		if k.index != -1 {
			t.Errorf("key %s dropped with index %d, want -1", k.token, k.index)
		}
	}
	if fmt.Sprint(order) != "[0 3 2 1]" {
		t.Errorf("heap order %v, want [0 3 2 1]", order)
	}
}

// TestKeyStateSize keeps a key's state within 384 bytes, a size class of
// the Go allocator: every key with jobs has one. It was 1,032 bytes (the
// 1,152-byte class) while it carried its step and its flights inline, and
// 512 while it kept its eight times as time.Time (24 bytes each; instant
// is 8). A field that does not fit moves out (see step, flights.aloft).
func TestKeyStateSize(t *testing.T) {
	if n := unsafe.Sizeof(keyState{}); n > 384 {
		t.Errorf("keyState is %d bytes, want at most 384", n)
	}
}
