package drain

// A Drainer's figures over all its keys, kept by each key as its state
// changes rather than counted over every key when asked: Stats and
// Deepest cost the same however many keys the Drainer holds.

// keyCounts are a Drainer's figures over all its keys, kept up to date by
// each key as its depth and its failed jobs stepped aside change, so that
// Stats and Deepest read them without looking at every key. Guarded by the
// Drainer's mu.
type keyCounts struct {
	withJobs int         // keys whose depth is above 0
	aside    int         // failed jobs stepped aside, over every key
	levels   []*keyState // the keys with jobs by depth: levels[l-1] heads those at level l (list)
}

// setDepth sets the key's depth: every change of it goes through here, so
// that the key counts among the keys with jobs exactly while its depth is
// above 0, listed by its depth.
func (k *keyState) setDepth(n int64) {
	if c := k.counts; c != nil {
		if (k.depth > 0) != (n > 0) {
			if n > 0 {
				c.withJobs++
			} else {
				c.withJobs--
			}
		}
		c.list(k, k.depth, n)
	}
	k.depth = n
}

// setAside sets the key's failed jobs stepped aside: every change of them
// goes through here, so that the Drainer's count of them follows.
func (k *keyState) setAside(aside []tried) {
	if k.counts != nil {
		k.counts.aside += len(aside) - len(k.aside)
	}
	k.aside = aside
}

// attach makes the key count in counts, as it is now.
func (k *keyState) attach(counts *keyCounts) {
	k.detach()
	k.counts = counts
	if k.depth > 0 {
		counts.withJobs++
	}
	counts.list(k, 0, k.depth)
	counts.aside += len(k.aside)
}

// detach takes the key out of the counts it counts in: it is forgotten.
func (k *keyState) detach() {
	c := k.counts
	if c == nil {
		return
	}
	if k.depth > 0 {
		c.withJobs--
	}
	c.list(k, k.depth, 0)
	c.aside -= len(k.aside)
	k.counts = nil
}

// maxLevel is the deepest level the index of the keys by depth tells
// apart: keys with more jobs share it, and Deepest sorts them when asked.
const maxLevel = 1024

// levelOf is the level of the index a key of depth n is listed at; 0: none.
func levelOf(n int64) int { return int(min(max(n, 0), maxLevel)) }

// list moves k from the level of its depth was to the level of its depth
// now, when they differ. counts.levels[l-1] heads the keys at level l, in
// a list through keyState.up and down.
func (c *keyCounts) list(k *keyState, was, now int64) {
	from, to := levelOf(was), levelOf(now)
	if from == to {
		return
	}
	if from > 0 {
		c.unlink(k, from)
	}
	if to > 0 {
		for len(c.levels) < to {
			c.levels = append(c.levels, nil)
		}
		k.down, k.up = c.levels[to-1], nil
		if k.down != nil {
			k.down.up = k
		}
		c.levels[to-1] = k
	}
}

// unlink takes k off level l.
func (c *keyCounts) unlink(k *keyState, l int) {
	if k.up != nil {
		k.up.down = k.down
	} else {
		c.levels[l-1] = k.down
	}
	if k.down != nil {
		k.down.up = k.up
	}
	k.up, k.down = nil, nil
	for n := len(c.levels); n > 0 && c.levels[n-1] == nil; n-- {
		c.levels = c.levels[:n-1]
	}
}
