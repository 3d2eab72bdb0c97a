package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shaper-dev/shaper/queue"
)

// The recording contract: a recorder asks every shaper serving policy P to
// record its submissions by a NATS request to <root>.P with a
// RecordRequest, every second while it records; each shaper answers with a
// RecordReply and publishes the rows of its submissions to <root>.P.rows in
// batches, each with the headers below. Rows are those of the trace format
// (package traffic), with at in seconds since the Unix epoch.
const (
	DefaultRecordSubject = "shaper.record"
	// HeaderRecordInstance names the shaper of a batch; HeaderRecordSeq is
	// the number of its first row (from 0, per shaper and policy);
	// HeaderRecordRows how many rows it holds; HeaderRecordDropped how many
	// rows the shaper dropped so far because its buffer was full.
	HeaderRecordInstance = "Shaper-Instance"
	HeaderRecordSeq      = "Shaper-Record-Seq"
	HeaderRecordRows     = "Shaper-Record-Rows"
	HeaderRecordDropped  = "Shaper-Record-Dropped"
)

// RecordRequest asks a shaper to record a policy for ForMs milliseconds
// (at most a minute).
type RecordRequest struct {
	ForMs int64 `json:"for_ms"`
}

// RecordReply is a shaper's answer to a RecordRequest: the policy it
// records, or an error (it does not serve the policy).
type RecordReply struct {
	Instance string `json:"instance"`
	Policy   string `json:"policy,omitempty"`
	// ForMs is how long the shaper records: the request's, at most a
	// minute.
	ForMs int64  `json:"for_ms,omitempty"`
	Error string `json:"error,omitempty"`
}

// RecordRows returns the subject the rows of policy are published on,
// under root.
func RecordRows(root, policy string) string { return root + "." + policy + ".rows" }

// RecordBatch is one batch of rows a shaper published.
type RecordBatch struct {
	// Instance is the shaper that recorded the rows.
	Instance string
	// Rows are rows of the trace format, each ending in a line break, with
	// at in seconds since the Unix epoch.
	Rows []byte
	// Lost counts the rows of this shaper missing just before this batch:
	// dropped by the shaper, or batches lost on the way (core NATS delivers
	// at most once).
	Lost uint64
}

// RecordStats says what a recording got.
type RecordStats struct {
	Shapers int    // the most shapers that answered one request
	Batches int    // batches received
	Lost    uint64 // rows lost over all shapers
}

// ErrNoShaper is returned by Record when no shaper answers a request to
// record.
var ErrNoShaper = errors.New("no shaper answered")

const (
	recordRenew = time.Second     // how often a recording is renewed
	recordFor   = 5 * time.Second // how long each renewal lasts
	recordDrain = 500 * time.Millisecond
)

// Record asks every shaper serving policy to record its submissions and
// calls batch with each batch of rows they publish, one at a time, until
// ctx ends; it then waits half a second for the batches on their way, and
// returns. It fails at once with ErrNoShaper when no shaper answers within
// the NATSConfig's Timeout, and with ErrUnknownPolicy when none that
// answers serves policy.
func (n *NATS) Record(ctx context.Context, policy string, batch func(RecordBatch)) (RecordStats, error) {
	var stats RecordStats
	if tok, err := queue.EncodeKey(policy); err != nil || tok != policy {
		return stats, fmt.Errorf("client: record %q: %w", policy, ErrUnknownPolicy)
	}
	root := n.recordRoot
	var mu sync.Mutex
	type seen struct{ next, dropped uint64 }
	shapers := map[string]seen{} // per shaper, the next row expected and the drops so far
	rows, err := n.nc.Subscribe(RecordRows(root, policy), func(m *nats.Msg) {
		b := RecordBatch{Instance: m.Header.Get(HeaderRecordInstance), Rows: m.Data}
		seq, _ := strconv.ParseUint(m.Header.Get(HeaderRecordSeq), 10, 64)
		count, _ := strconv.ParseUint(m.Header.Get(HeaderRecordRows), 10, 64)
		dropped, _ := strconv.ParseUint(m.Header.Get(HeaderRecordDropped), 10, 64)
		mu.Lock()
		// A shaper's first batch starts this recorder's count of it.
		if last, ok := shapers[b.Instance]; ok {
			if seq > last.next {
				b.Lost += seq - last.next
			}
			if dropped > last.dropped {
				b.Lost += dropped - last.dropped
			}
		}
		shapers[b.Instance] = seen{next: seq + count, dropped: dropped}
		stats.Batches++
		stats.Lost += b.Lost
		mu.Unlock()
		batch(b)
	})
	if err != nil {
		return stats, fmt.Errorf("client: record %s: %w", policy, err)
	}
	defer rows.Unsubscribe()
	_ = rows.SetPendingLimits(-1, 256<<20)

	replies := make(chan *nats.Msg, 64)
	inbox := n.nc.NewRespInbox()
	answers, err := n.nc.ChanSubscribe(inbox, replies)
	if err != nil {
		return stats, fmt.Errorf("client: record %s: %w", policy, err)
	}
	defer answers.Unsubscribe()
	body, _ := json.Marshal(RecordRequest{ForMs: recordFor.Milliseconds()})
	ask := func() error { return n.nc.PublishRequest(root+"."+policy, inbox, body) }

	if err := ask(); err != nil {
		return stats, fmt.Errorf("client: record %s: %w", policy, err)
	}
	// The first round: at least one shaper must record the policy.
	first := time.NewTimer(n.timeout)
	defer first.Stop()
	var refusals []string
	recording := 0
wait:
	for {
		select {
		case m := <-replies:
			if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
				// The server's "no responders": nobody listens.
				return stats, fmt.Errorf("client: record %s: %w on %s (%w)", policy, ErrNoShaper, root+"."+policy, nats.ErrNoResponders)
			}
			var r RecordReply
			if err := json.Unmarshal(m.Data, &r); err != nil {
				return stats, fmt.Errorf("client: record %s: %w: %q", policy, ErrBadAnswer, m.Data)
			}
			if r.Error != "" {
				refusals = append(refusals, r.Instance+": "+r.Error)
			} else {
				recording++
			}
			first.Reset(recordDrain) // give the other shapers a moment to answer
		case <-first.C:
			break wait
		case <-ctx.Done():
			if recording == 0 {
				return stats, ctx.Err()
			}
			break wait
		}
	}
	switch {
	case recording == 0 && len(refusals) == 0:
		return stats, fmt.Errorf("client: record %s: %w on %s within %v", policy, ErrNoShaper, root+"."+policy, n.timeout)
	case recording == 0:
		return stats, fmt.Errorf("client: record %s: %w (%s)", policy, ErrUnknownPolicy, strings.Join(refusals, "; "))
	}
	mu.Lock()
	stats.Shapers = recording
	mu.Unlock()

	renew := time.NewTicker(recordRenew)
	defer renew.Stop()
	answered := 0
	for {
		select {
		case <-renew.C:
			mu.Lock()
			stats.Shapers = max(stats.Shapers, answered)
			mu.Unlock()
			answered = 0
			if err := ask(); err != nil && !errors.Is(err, nats.ErrConnectionReconnecting) {
				return stats, fmt.Errorf("client: record %s: %w", policy, err)
			}
		case m := <-replies:
			if !bytes.Contains(m.Data, []byte(`"error"`)) {
				answered++
			}
		case <-ctx.Done():
			time.Sleep(recordDrain) // the batches on their way
			mu.Lock()
			defer mu.Unlock()
			return stats, nil
		}
	}
}
