package ingress

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestAcceptedJSONMatchesEncodingJSON checks that the hand-written body of
// a 202 is byte for byte what json.Encoder made of it before.
func TestAcceptedJSONMatchesEncodingJSON(t *testing.T) {
	for _, a := range []answer{
		{ID: "dn1ml4ye3996-ya", Policy: "p", Key: "k1", Queued: 3, ETAms: 250},
		{ID: "x", Policy: "orders", Key: `a"<b>&\` + "\n\xffключ", Queued: 0, ETAms: 0, Duplicate: true},
		{Queued: -1, ETAms: 1 << 40},
	} {
		var want bytes.Buffer
		err := json.NewEncoder(&want).Encode(struct {
			ID        string `json:"id"`
			Policy    string `json:"policy"`
			Key       string `json:"key"`
			Queued    int64  `json:"queued"`
			ETAms     int64  `json:"eta_ms"`
			Duplicate bool   `json:"duplicate,omitempty"`
		}{a.ID, a.Policy, a.Key, a.Queued, a.ETAms, a.Duplicate})
		if err != nil {
			t.Fatal(err)
		}
		if got := appendAccepted(nil, a); !bytes.Equal(got, want.Bytes()) {
			t.Errorf("appendAccepted(%+v) = %s, want %s", a, got, want.Bytes())
		}
	}
}
