package replay_test

import (
	"bytes"
	"io"
	"testing"

	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/shaper/replay"
	"github.com/shaper-dev/shaper/shaper/traffic"
)

// traceOf writes recs as a trace and returns its source.
func traceOf(tb testing.TB, recs []traffic.Record) replay.Source {
	tb.Helper()
	var buf bytes.Buffer
	w := traffic.NewWriter(&buf)
	for _, r := range recs {
		if err := w.Write(r); err != nil {
			tb.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		tb.Fatal(err)
	}
	b := buf.Bytes()
	return func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
}

// synthetic writes the trace s describes.
func synthetic(tb testing.TB, s traffic.Synth) replay.Source {
	tb.Helper()
	seq, err := s.Records()
	if err != nil {
		tb.Fatal(err)
	}
	var recs []traffic.Record
	for r := range seq {
		recs = append(recs, r)
	}
	return traceOf(tb, recs)
}

// policy parses one policy in the policy file's YAML.
func policy(tb testing.TB, yaml string) policies.Policy {
	tb.Helper()
	set, err := policies.Parse("test.yaml", []byte("policies:\n"+yaml))
	if err != nil {
		tb.Fatal(err)
	}
	return set.Policies()[0]
}
