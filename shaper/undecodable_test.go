package shaper_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A message in a queue stream that cannot be a job the shaper stored — a
// subject token no key encodes to, a Shaper-Job-Id that is no job id, a
// Shaper-Key naming another key than its subject — is dead-lettered with
// reason undecodable and a history saying why, and leaves the queue, which
// ends empty. The keys around it are delivered in order, at their rate, as
// if it were not there; a bad Shaper-Attempt is tolerated (delivered).
func TestUndecodableDeadLettered(t *testing.T) {
	r := start(t, `
policies:
  - name: u
    outflow: 20/s
    queue: 10
`)
	got := collect(t, r.nc, "shaper.out.u.>")
	js, err := jetstream.New(r.nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	raw := func(subject, payload string, hdr ...string) {
		t.Helper()
		m := &nats.Msg{Subject: subject, Data: []byte(payload), Header: nats.Header{}}
		for i := 0; i+1 < len(hdr); i += 2 {
			m.Header.Set(hdr[i], hdr[i+1])
		}
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatalf("raw publish to %s: %v", subject, err)
		}
	}
	if a := r.post(t, "u", "a", []byte("a1")); a.code != 202 {
		t.Fatalf("a1: %d %v", a.code, a.body)
	}
	raw("shaper.q.u.~x", "no key's token")
	raw("shaper.q.u.b", "bad id", "Shaper-Job-Id", "not an id!")
	raw("shaper.q.u.b", "b0", "Shaper-Attempt", "many")
	raw("shaper.q.u.c", "another key", "Shaper-Key", "d")
	for _, j := range []struct{ key, payload string }{{"a", "a2"}, {"b", "b1"}} {
		if a := r.post(t, "u", j.key, []byte(j.payload)); a.code != 202 {
			t.Fatalf("%s: %d %v", j.payload, a.code, a.body)
		}
	}

	msgs := got(4, 10*time.Second)
	byKey := map[string][]string{}
	last := map[string]time.Time{}
	for _, m := range msgs {
		k := m.Header.Get("Shaper-Key")
		byKey[k] = append(byKey[k], string(m.Data))
		// Arrivals, not starts: a suite run saw 35 ms between b0 and b1
		// under load (the drain's starts are checked exactly elsewhere).
		if at, ok := last[k]; ok && received(m).Sub(at) < 30*time.Millisecond {
			t.Errorf("key %s: deliveries %v apart, want the 50 ms of 20/s", k, received(m).Sub(at))
		}
		last[k] = received(m)
	}
	if fmt.Sprint(byKey) != "map[a:[a1 a2] b:[b0 b1]]" {
		t.Errorf("delivered %v, want a1 a2 for a and b0 b1 for b, in order", byKey)
	}

	var dead []any
	waitFor(t, "3 dead letters", 10*time.Second, func() bool {
		dead, _ = r.get(t, "/v1/dead?policy=u&reason=undecodable")["dead"].([]any)
		return len(dead) == 3
	})
	whys := map[string]string{"": `subject token "~x" is not a key's encoding`, "b": `Shaper-Job-Id header "not an id!" is not a job id`,
		"c": `Shaper-Key header "d" is not the key of its subject token "c"`}
	for _, d := range dead {
		l := d.(map[string]any)
		key, _ := l["key"].(string)
		why, ok := whys[key]
		delete(whys, key)
		if !ok || l["reason"] != "undecodable" || l["from"] != "queue" || !strings.Contains(fmt.Sprint(l["history"]), why) {
			t.Errorf("dead letter %v, want reason undecodable and a history saying why (%s)", l, why)
		}
		id, _ := l["id"].(string)
		if st := r.get(t, "/v1/jobs/"+id); st["status"] != "dead" || st["reason"] != "undecodable" {
			t.Errorf("GET /v1/jobs/%s = %v, want dead, undecodable", id, st)
		}
	}
	waitFor(t, "an empty queue", 5*time.Second, func() bool {
		s, err := js.Stream(context.Background(), "SHAPER_Q_u")
		return err == nil && s.CachedInfo().State.Msgs == 0
	})
	time.Sleep(200 * time.Millisecond)
	if n := len(got(4, time.Second)); n != 4 {
		t.Errorf("%d deliveries, want the 4 jobs only", n)
	}
	// Replayed, the one with no key cannot be submitted again, and the
	// answer says why (a tour saw done: false with no reason).
	resp, err := http.Post(r.base+"/v1/dead/replay?policy=u&reason=undecodable", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Done    int
		Results []map[string]any
	}
	json.NewDecoder(resp.Body).Decode(&rep)
	resp.Body.Close()
	got(4+rep.Done, 5*time.Second) // the ones replayed are delivered before the shaper stops
	saidWhy := false
	for _, res := range rep.Results {
		if res["done"] == false {
			why, _ := res["why"].(string)
			if !strings.HasPrefix(why, "400: bad key") {
				t.Errorf("replay result %v: not done, want why (400: bad key …)", res)
			}
			saidWhy = true
		}
	}
	if !saidWhy {
		t.Errorf("replay results %v: want the keyless letter not done", rep.Results)
	}
}
