package cluster

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
)

// A difference between the shapers' files is logged once two reads in a
// row found it, and its end once after: shapers reloaded together differ
// for one read until each renewed its entry, and a tour's simultaneous
// reload of three shapers logged a false warning on each, and no end.
func TestFilesDifferLoggedWhenTheyLast(t *testing.T) {
	var log strings.Builder
	c := &Cluster{cfg: Config{Instance: "a"}, log: slog.New(slog.NewTextHandler(&log, nil))}
	c.SetFileDigests(func() map[string]string { return map[string]string{"p": "new"} })
	b := func(digest string) [][]byte {
		v, _ := json.Marshal(Member{Instance: "b", Policies: map[string]string{"p": digest}})
		return [][]byte{v}
	}
	lines := func() (warned, agreed int) {
		return strings.Count(log.String(), "policy files differ"), strings.Count(log.String(), "agree again")
	}
	c.compareFiles(b("old")) // b has not reloaded yet
	c.compareFiles(b("new")) // it has
	if w, a := lines(); w != 0 || a != 0 {
		t.Fatalf("a difference for one read logged %d warnings and %d ends, want none:\n%s", w, a, log.String())
	}
	c.compareFiles(b("old"))
	c.compareFiles(b("old"))
	c.compareFiles(b("old"))
	if w, _ := lines(); w != 1 {
		t.Fatalf("a difference found in three reads logged %d warnings, want 1:\n%s", w, log.String())
	}
	if d := c.FileDiffersOn("p"); len(d) != 1 || d[0] != "b" {
		t.Errorf("FileDiffersOn(p) = %v, want [b] (at once, unlike the log)", d)
	}
	c.compareFiles(b("new"))
	if w, a := lines(); w != 1 || a != 1 {
		t.Errorf("after the files agree: %d warnings, %d ends, want 1 and 1:\n%s", w, a, log.String())
	}
}
