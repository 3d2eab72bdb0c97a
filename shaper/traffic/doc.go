// Package traffic is shaper's trace format: a plain, stable record of the
// submissions of one policy — when each came, for which key, how large it
// was and what became of it — that `shaper record` writes from a running
// shaper, `producer trace` makes up, `producer send --trace` plays against a
// live shaper and `shaper tune` replays through the shaper's own admission
// and drain.
//
// # The format
//
// A trace is a CSV file (RFC 4180, UTF-8, lines ending in LF or CRLF).
// Lines starting with '#' are comments and may appear anywhere; the first
// other line is the header, and every line after it is one submission:
//
//	# shaper trace of policy orders, recorded from 2026-05-01T10:00:00Z for 10m0s
//	at,key,size,outcome
//	0.000000,acme,64,accepted
//	0.013250,"tenant, ltd",120,rejected
//	0.500000,acme,64,
//
// The columns, in this order:
//
//   - at: when the job was submitted, in seconds since the start of the
//     trace, a decimal number with at most six digits after the point
//     (microseconds). Rows are in time order: at never decreases.
//   - key: the job's key, any UTF-8 string of 1 to 256 bytes, quoted as
//     CSV quotes (when it holds a comma, a double quote or a line break).
//   - size: the payload's size in bytes, a whole number.
//   - outcome: what the shaper answered: accepted (202), rejected (429, the
//     key's queue full), deferred (429, kept), limited (429, the admission
//     limit), unavailable (503) or invalid (4xx); empty when not known (a
//     made-up trace).
//
// The format is stable: readers take the first four columns by position,
// check that the header names them, and ignore any column after them, so
// later versions may only add columns at the end.
//
// # Reading and writing
//
// Reader streams a trace row by row, holding one row at a time, however
// long the trace; Writer writes one. Synth
// makes up traffic: Poisson or evenly spaced arrivals, bursts, a diurnal
// ramp, and uniform or heavy-tailed (Zipf) keys.
package traffic
