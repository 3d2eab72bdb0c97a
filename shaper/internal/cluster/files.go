package cluster

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
)

// Shapers sharing a cluster should serve the same policy files: the
// drainer of a key paces it by its own file, while every shaper answers
// its producers (ETAs, Retry-After, 429s) by its own. Each shaper writes
// in its member entry a digest of each policy as its file sets it (live
// overrides are shared and left out), and compares the others' with its
// own at every read of the members.

// SetFileDigests gives the digests of the policies as this shaper's file
// sets them, asked at every renewal of its member entry (a reload may
// change them). Call it before KeepMembership.
func (c *Cluster) SetFileDigests(digests func() map[string]string) {
	c.digests.Store(&digests)
}

// FilesChanged says that this shaper's policy file changed (a reload): its
// member entry, with the new digests, is renewed at once, not at its next
// renewal, so that the other shapers compare the files as they are.
func (c *Cluster) FilesChanged() {
	if c == nil {
		return
	}
	c.filesChanged.Store(true)
	c.wake()
}

// memberValue is this shaper's member entry now.
func (c *Cluster) memberValue() []byte {
	m := c.me
	if f := c.digests.Load(); f != nil {
		m.Policies = (*f)()
	}
	v, _ := json.Marshal(m)
	return v
}

// FileDiffersOn returns the instances of the shapers whose policy file
// sets policy otherwise than this shaper's, as their member entries said
// at the last read (sorted; nil when none).
func (c *Cluster) FileDiffersOn(policy string) []string {
	if c == nil {
		return nil
	}
	if d := c.differs.Load(); d != nil {
		return (*d)[policy]
	}
	return nil
}

// compareFiles compares the digests in the other shapers' member entries
// (others, their JSON values) with this shaper's, keeps the differences
// for FileDiffersOn and logs each new one.
func (c *Cluster) compareFiles(others [][]byte) {
	f := c.digests.Load()
	if f == nil {
		return
	}
	mine := (*f)()
	differs := map[string][]string{}
	for _, v := range others {
		var m Member
		if json.Unmarshal(v, &m) != nil || m.Instance == c.cfg.Instance || m.Policies == nil {
			continue // an entry of a release before digests says nothing
		}
		for name, d := range mine {
			if theirs, ok := m.Policies[name]; !ok || theirs != d { // not served there, or set otherwise
				differs[name] = append(differs[name], m.Instance)
			}
		}
	}
	for name := range differs {
		slices.Sort(differs[name])
	}
	c.filesMu.Lock()
	defer c.filesMu.Unlock()
	old := c.differs.Swap(&differs)
	// A difference is logged once two reads in a row found it: shapers
	// reloaded together differ for a read, until each renewed its entry
	// (a tour's simultaneous reload of three logged three false warnings).
	if c.warnedFiles == nil {
		c.warnedFiles = map[string][]string{}
	}
	for _, name := range slices.Sorted(maps.Keys(differs)) {
		if old != nil && slices.Equal((*old)[name], differs[name]) && !slices.Equal(c.warnedFiles[name], differs[name]) {
			c.log.Warn("policy files differ between shapers: the drainer paces a key by its own file (and every shaper's eta_ms and Retry-After come from it), each shaper admits by its own; give every shaper the same file and reload each",
				"policy", name, "here", c.cfg.Instance, "others", strings.Join(differs[name], ", "))
			c.warnedFiles[name] = differs[name]
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.warnedFiles)) {
		if _, ok := differs[name]; !ok {
			c.log.Info("policy files agree again between shapers", "policy", name)
			delete(c.warnedFiles, name)
		}
	}
}

// readMemberValues reads the member entries of the other shapers, keys
// as listed; an entry gone meanwhile is left out.
func (c *Cluster) readMemberValues(ctx context.Context, keys []string) [][]byte {
	self := memberKey(c.cfg.Instance)
	var out [][]byte
	for _, k := range keys {
		if k == self {
			continue
		}
		if e, err := c.leases.Get(ctx, k); err == nil {
			out = append(out, e.Value())
		}
	}
	return out
}
