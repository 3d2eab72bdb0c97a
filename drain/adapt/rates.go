package adapt

// Rates is what an adaptive outflow does now, to show: the policy's rate
// (an adaptive total), and the rates of its deepest keys (each key's
// own). It is a plain value.
type Rates struct {
	Policy *Status     `json:"policy,omitempty"`
	Keys   []KeyStatus `json:"keys,omitempty"`
}

// KeyStatus is the adaptive rate of one key, with the jobs it has queued.
type KeyStatus struct {
	Key   string `json:"key"`
	Depth int64  `json:"depth"`
	Status
}

// Sum returns the status of several controllers that share one rate (the
// partitions of a policy, each with its share of the total): rates,
// ceilings, floors and capacities added up; the baseline and reason of
// the one furthest under its ceiling. ok is false for none.
func Sum(all []Status) (sum Status, ok bool) {
	low := -1.0
	for _, st := range all {
		sum.Rate += st.Rate
		sum.Ceiling += st.Ceiling
		sum.Floor += st.Floor
		sum.Capacity += st.Capacity
		if share := st.Rate / max(st.Ceiling, 1e-9); low < 0 || share < low {
			low, sum.Baseline, sum.Reason = share, st.Baseline, st.Reason
		}
	}
	return sum, len(all) > 0
}
