package traffic

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// Writer writes a trace. It buffers: call Flush at the end. A Writer is not
// safe for concurrent use.
type Writer struct {
	w    io.Writer
	buf  []byte
	err  error // the first error writing to w
	last time.Duration
}

// NewWriter returns a Writer of a trace to w. Each of comments becomes a
// comment line before the header (a line break in one starts a new one).
func NewWriter(w io.Writer, comments ...string) *Writer {
	tw := &Writer{w: w}
	for _, c := range comments {
		for line := range strings.SplitSeq(c, "\n") {
			tw.buf = append(append(append(tw.buf, "# "...), line...), '\n')
		}
	}
	tw.buf = append(tw.buf, strings.Join(header[:], ",")...)
	tw.buf = append(tw.buf, '\n')
	return tw
}

// Write writes r as the trace's next row. It refuses a record earlier than
// the one before, a negative size, and a key the shaper would refuse for
// its length (empty, or over MaxKeyLen bytes).
func (w *Writer) Write(r Record) error {
	switch {
	case r.At < 0:
		return fmt.Errorf("traffic: write: time %v is negative", r.At)
	case r.At < w.last:
		return fmt.Errorf("traffic: write: time %v is before the previous row's %v", r.At, w.last)
	case r.Size < 0:
		return fmt.Errorf("traffic: write: size %d is negative", r.Size)
	case r.Key == "" || len(r.Key) > MaxKeyLen:
		return fmt.Errorf("traffic: write: key of %d bytes: want 1 to %d", len(r.Key), MaxKeyLen)
	case r.Outcome >= numOutcomes:
		return fmt.Errorf("traffic: write: unknown outcome %d", r.Outcome)
	}
	w.last = r.At
	w.buf = AppendRow(w.buf, r.At, r.Key, r.Size, r.Outcome)
	if len(w.buf) >= 32<<10 {
		return w.spill()
	}
	return nil
}

// spill writes what is buffered to the underlying writer; after an error it
// writes nothing more and returns that error.
func (w *Writer) spill() error {
	if w.err == nil && len(w.buf) > 0 {
		_, w.err = w.w.Write(w.buf)
	}
	w.buf = w.buf[:0]
	return w.err
}

// Flush writes what is buffered to the underlying writer.
func (w *Writer) Flush() error { return w.spill() }

// AppendRow appends the CSV row of one submission, with at in seconds
// since the trace's origin to the microsecond, and its line break. Times
// before the origin are written as 0. It is the row a Writer writes, for
// callers that batch rows themselves.
func AppendRow(b []byte, at time.Duration, key string, size int, o Outcome) []byte {
	b = appendSeconds(b, at)
	b = append(b, ',')
	b = appendField(b, key)
	b = append(b, ',')
	b = strconv.AppendInt(b, int64(size), 10)
	b = append(b, ',')
	if o < numOutcomes {
		b = append(b, outcomeNames[o]...)
	}
	return append(b, '\n')
}

// appendSeconds appends at as the format writes times: seconds to the
// microsecond, 0 for a time before the origin.
func appendSeconds(b []byte, at time.Duration) []byte {
	us := max(at, 0) / time.Microsecond
	b = strconv.AppendInt(b, int64(us/1_000_000), 10)
	frac := int64(us % 1_000_000)
	b = append(b, '.')
	for d := int64(100_000); d > 0; d /= 10 {
		b = append(b, byte('0'+frac/d%10))
	}
	return b
}

// appendField appends s as a CSV field, quoted when it must be.
func appendField(b []byte, s string) []byte {
	if !strings.ContainsAny(s, ",\"\r\n") {
		return append(b, s...)
	}
	b = append(b, '"')
	for i := range len(s) {
		if s[i] == '"' {
			b = append(b, '"')
		}
		b = append(b, s[i])
	}
	return append(b, '"')
}
