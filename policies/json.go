package policies

import (
	"encoding/json"
	"fmt"
	"time"
)

// Durations appear in JSON as Go duration strings ("1s", "1m0s"), as in the
// policy file, not as nanoseconds.

type retryJSON struct {
	Attempts   int    `json:"attempts"`
	Backoff    string `json:"backoff"`
	MaxBackoff string `json:"max_backoff"`
	Deadline   string `json:"deadline"`
	Budget     string `json:"budget,omitempty"` // "20%", "off"; left out when zero (not filled in)
}

// MarshalJSON implements json.Marshaler.
func (r Retry) MarshalJSON() ([]byte, error) {
	v := retryJSON{r.Attempts, r.Backoff.String(), r.MaxBackoff.String(), r.Deadline.String(), ""}
	if r.Budget != 0 {
		v.Budget = r.Budget.String()
	}
	return json.Marshal(v)
}

// UnmarshalJSON implements json.Unmarshaler.
func (r *Retry) UnmarshalJSON(b []byte) error {
	var v retryJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	var out Retry
	out.Attempts = v.Attempts
	if v.Budget != "" {
		b, err := ParseBudget(v.Budget)
		if err != nil {
			return fmt.Errorf("retry.budget: %w", err)
		}
		out.Budget = b
	}
	for _, f := range []struct {
		name string
		s    string
		d    *time.Duration
	}{{"backoff", v.Backoff, &out.Backoff}, {"max_backoff", v.MaxBackoff, &out.MaxBackoff}, {"deadline", v.Deadline, &out.Deadline}} {
		if f.s == "" {
			continue
		}
		d, err := time.ParseDuration(f.s)
		if err != nil {
			return fmt.Errorf("retry.%s: %w", f.name, err)
		}
		*f.d = d
	}
	*r = out
	return nil
}

type deliverJSON struct {
	Subject string `json:"subject,omitempty"`
	Stream  string `json:"stream,omitempty"`
	Mode    string `json:"mode,omitempty"`
	Webhook string `json:"webhook,omitempty"`
	Timeout string `json:"timeout,omitempty"`
}

// MarshalJSON implements json.Marshaler.
func (d Deliver) MarshalJSON() ([]byte, error) {
	v := deliverJSON{Subject: d.Subject, Stream: d.Stream, Mode: string(d.Mode), Webhook: d.Webhook}
	if d.Timeout > 0 {
		v.Timeout = d.Timeout.String()
	}
	return json.Marshal(v)
}

// UnmarshalJSON implements json.Unmarshaler.
func (d *Deliver) UnmarshalJSON(b []byte) error {
	var v deliverJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	out := Deliver{Subject: v.Subject, Stream: v.Stream, Mode: DeliverMode(v.Mode), Webhook: v.Webhook}
	if v.Timeout != "" {
		t, err := time.ParseDuration(v.Timeout)
		if err != nil {
			return fmt.Errorf("deliver.timeout: %w", err)
		}
		out.Timeout = t
	}
	*d = out
	return nil
}
