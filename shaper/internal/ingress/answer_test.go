package ingress

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// TestAcceptedAsEncodingJSON holds the 202's body, written by hand, to
// what encoding/json writes of its documented shape.
func TestAcceptedAsEncodingJSON(t *testing.T) {
	type body struct {
		ID        string    `json:"id"`
		Policy    string    `json:"policy"`
		Key       string    `json:"key"`
		Queued    int64     `json:"queued"`
		ETAms     int64     `json:"eta_ms"`
		Duplicate bool      `json:"duplicate,omitempty"`
		Waiting   time.Time `json:"waiting_for_consumer_since,omitzero"`
	}
	since := time.Date(2026, 11, 29, 3, 22, 14, 123456789, time.UTC)
	for _, a := range []answer{
		{ID: "dn7delr9k0v2-1", Policy: "p", Key: "k1", Queued: 1},
		{ID: "x", Policy: "orders", Key: "<tenant>&\"42\"\xff\u2028", Queued: 100000, ETAms: 3600000, Duplicate: true},
		{ID: "y", Policy: "p", Key: "k", Queued: 2, ETAms: 7, WaitingSince: since},
	} {
		want, err := json.Marshal(body{a.ID, a.Policy, a.Key, a.Queued, a.ETAms, a.Duplicate, a.WaitingSince})
		if err != nil {
			t.Fatal(err)
		}
		o := a.accepted()
		if got := o.Bytes(); !bytes.Equal(got, append(want, '\n')) {
			t.Errorf("202 body by hand:\n%s\nencoding/json:\n%s", got, want)
		}
	}
}
