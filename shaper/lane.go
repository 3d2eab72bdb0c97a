package shaper

import (
	"encoding/json"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/shaper-dev/shaper/shaper/client"
	"github.com/shaper-dev/shaper/shaper/internal/httpapi"
)

// The direct lane's side in the shaper (client.Direct is the other end).
// A producer asks whether it may publish a policy's jobs straight into
// the policy's queue stream, and where, by a request to
// <client.DefaultLaneSubject>.<policy>; any shaper answers (one queue
// group), with the policy's client.Lane. Each shaper publishes the Lane of
// a policy again on <root>.<policy>.state whenever it changes there (a
// live change, a reload), so that producers close the lane within a round
// trip of a change that makes it unsafe; they also ask again every few
// seconds, in case such a message was lost.

// lane returns policy name's Lane as this shaper serves it now.
func (t *table) lane(name string) client.Lane {
	line := t.line(name)
	if line == nil {
		return client.Lane{Policy: name, Code: 404, Refused: httpapi.UnknownPolicy(name, t.names())}
	}
	open, refused := line.Gate.DirectLane()
	p := line.Gate.Policy()
	l := line.queue.Layout()
	return client.Lane{
		Policy:           name,
		Open:             open,
		Refused:          refused,
		Code:             200,
		Stream:           l.Stream,
		Subject:          l.Prefix,
		Epoch:            line.queue.Epoch(),
		MaxPayload:       l.MaxPayload,
		Queue:            p.Queue,
		FullRetryAfterMs: max((p.Outflow.Interval().Microseconds()+999)/1000, 1),
	}
}

// lanes answers the direct lane's requests and announces its changes.
type lanes struct {
	root   string // "<DefaultLaneSubject>."
	lookup func(policy string) client.Lane

	mu   sync.Mutex
	nc   *nats.Conn
	last map[string]client.Lane // as last announced
}

func newLanes(lookup func(string) client.Lane) *lanes {
	return &lanes{root: client.DefaultLaneSubject + ".", lookup: lookup, last: make(map[string]client.Lane)}
}

// subscribe starts answering requests on nc, and announces the lane of
// each of policies: producers learn at once what a shaper (re)started
// with a changed policy file says.
func (ls *lanes) subscribe(nc *nats.Conn, policies []string) error {
	if _, err := nc.QueueSubscribe(ls.root+"*", "shaper", ls.answer); err != nil {
		return err
	}
	ls.mu.Lock()
	ls.nc = nc
	ls.mu.Unlock()
	for _, name := range policies {
		ls.announce(name)
	}
	return nil
}

// answer replies to a request for a policy's Lane.
func (ls *lanes) answer(m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	b, _ := json.Marshal(ls.lookup(strings.TrimPrefix(m.Subject, ls.root)))
	m.Respond(b)
}

// announce publishes policy's Lane on <root>.<policy>.state when it
// differs from the one announced last (or none was), once subscribed.
func (ls *lanes) announce(policy string) {
	// Looked up under the lock, so that two announcements of one policy
	// cannot go out in the opposite order. The table's locks are never
	// held when it calls announce.
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.nc == nil {
		return
	}
	l := ls.lookup(policy)
	if old, ok := ls.last[policy]; ok && old == l {
		return
	}
	ls.last[policy] = l
	b, _ := json.Marshal(l)
	ls.nc.Publish(ls.root+policy+".state", b)
}
