package drain

import "time"

// instant is a time a key's state keeps in 8 bytes instead of a
// time.Time's 24: the nanoseconds from base, an instant of the process's
// start (every key with jobs has a state, and eight such times were a
// quarter of it). Made from a reading of the clock, it keeps its
// monotonic part: the time it gives back compares with other readings as
// the reading did. A virtual clock's times, which have none, compare by
// their wall clock, as before. The zero instant is the zero time, so a
// state's zero value means what it did with time.Time fields; a time at
// base itself is kept a nanosecond later. The wall clock reading of the
// time given back is base's plus the monotonic time since: a time handed
// to another process (a hand-over's last starts and slots) is off by any
// step of this machine's wall clock since the process started, as it is
// off by the difference between two machines' clocks anyway.
type instant int64

// base is what instants count from.
var base = time.Now()

// never is the instant of the zero time: the zero value.
const never instant = 0

// instantOf returns t as an instant.
func instantOf(t time.Time) instant {
	if t.IsZero() {
		return never
	}
	if i := instant(t.Sub(base)); i != never {
		return i
	}
	return 1
}

// time returns the instant as a time.
func (i instant) time() time.Time {
	if i == never {
		return time.Time{}
	}
	return base.Add(time.Duration(i))
}
