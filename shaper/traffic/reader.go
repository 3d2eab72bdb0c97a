package traffic

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"
)

// ErrFormat is wrapped by every error about what a trace holds (not about
// reading it): the error says the line and what is wrong.
var ErrFormat = errors.New("not a shaper trace")

// Reader reads a trace row by row. It holds one row at a time, so a trace
// of any length reads in the memory of a row. A Reader is not safe for
// concurrent use.
type Reader struct {
	br        *bufio.Reader
	unordered bool // rows only, in any order (NewRowReader)
	line      int  // of the last line read
	header    bool // the header was read
	comments  []string
	last      time.Duration // of the last row read

	record  []byte   // the logical record being parsed (lines joined)
	fields  [][]byte // its fields, into record or scratch
	scratch []byte   // unquoted fields
}

// NewReader returns a Reader of the trace in r.
func NewReader(r io.Reader) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, 64<<10)}
}

// NewRowReader returns a Reader of rows without a header, in any order:
// the batches a shaper publishes while it records, whose times are
// seconds since the Unix epoch and come in the order the submissions were
// decided.
func NewRowReader(r io.Reader) *Reader {
	rr := NewReader(r)
	rr.unordered, rr.header = true, true
	return rr
}

// Comments returns the comment lines read so far, without their '#' and the
// space after it: those before the header once the first Read returned.
func (r *Reader) Comments() []string { return r.comments }

// Line returns the number of the last line read.
func (r *Reader) Line() int { return r.line }

// Read returns the next row; io.EOF after the last one. An error wrapping
// ErrFormat names the line and what is wrong with it; a trace without a
// header, even an empty one, is such an error.
func (r *Reader) Read() (Record, error) {
	for {
		ok, err := r.next()
		if err != nil {
			if err == io.EOF && !r.header {
				return Record{}, fmt.Errorf("traffic: %w: no header row (want %q)", ErrFormat, "at,key,size,outcome")
			}
			return Record{}, err
		}
		if !ok {
			continue // a comment or an empty line
		}
		if !r.header {
			if err := r.checkHeader(); err != nil {
				return Record{}, err
			}
			r.header = true
			continue
		}
		return r.row()
	}
}

// next reads the next logical record into r.record and splits its fields.
// It returns false for a comment or an empty line.
func (r *Reader) next() (bool, error) {
	r.record = r.record[:0]
	first := r.line + 1
	for {
		line, err := r.br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			return false, r.errorf(r.line+1, "line longer than %d bytes", r.br.Size())
		}
		if len(line) == 0 && err != nil {
			if err == io.EOF && len(r.record) > 0 {
				return false, r.errorf(first, "a quoted field is not closed")
			}
			return false, err
		}
		r.line++
		if len(r.record) == 0 && line[0] == '#' {
			if !r.header {
				c := bytes.TrimRight(line[1:], "\r\n")
				r.comments = append(r.comments, string(bytes.TrimPrefix(c, []byte(" "))))
			}
			return false, nil
		}
		r.record = append(r.record, line...)
		if bytes.Count(r.record, []byte{'"'})%2 == 0 {
			break // not inside a quoted field: the record is whole
		}
		if err != nil {
			return false, r.errorf(first, "a quoted field is not closed")
		}
	}
	rec := bytes.TrimRight(r.record, "\r\n")
	if len(rec) == 0 {
		return false, nil
	}
	return true, r.split(rec, first)
}

// split parses the fields of one record (its line break removed).
func (r *Reader) split(rec []byte, line int) error {
	r.fields, r.scratch = r.fields[:0], r.scratch[:0]
	for {
		if len(rec) == 0 || rec[0] != '"' {
			i := bytes.IndexByte(rec, ',')
			f := rec
			if i >= 0 {
				f = rec[:i]
			}
			if bytes.IndexByte(f, '"') >= 0 {
				return r.errorf(line, "a double quote in an unquoted field %q", f)
			}
			r.fields = append(r.fields, f)
			if i < 0 {
				return nil
			}
			rec = rec[i+1:]
			continue
		}
		start := len(r.scratch)
		i := 1
		for {
			j := bytes.IndexByte(rec[i:], '"')
			if j < 0 {
				return r.errorf(line, "a quoted field is not closed")
			}
			r.scratch = append(r.scratch, rec[i:i+j]...)
			i += j + 1
			if i < len(rec) && rec[i] == '"' {
				r.scratch = append(r.scratch, '"')
				i++
				continue
			}
			break
		}
		r.fields = append(r.fields, r.scratch[start:len(r.scratch):len(r.scratch)])
		switch {
		case i == len(rec):
			return nil
		case rec[i] != ',':
			return r.errorf(line, "text after a quoted field")
		}
		rec = rec[i+1:]
	}
}

func (r *Reader) checkHeader() error {
	if len(r.fields) < len(header) {
		return r.errorf(r.line, "header %q: want at least the columns %q", bytes.Join(r.fields, []byte(",")), "at,key,size,outcome")
	}
	for i, name := range header {
		f := r.fields[i]
		if i == 0 {
			f = bytes.TrimPrefix(f, []byte("\ufeff")) // a byte order mark, as spreadsheets write
		}
		if got := string(bytes.TrimSpace(f)); got != name {
			return r.errorf(r.line, "header: column %d is %q, want %q (the columns are at,key,size,outcome)", i+1, got, name)
		}
	}
	return nil
}

// row turns the fields of a row into a Record.
func (r *Reader) row() (Record, error) {
	line := r.line
	if len(r.fields) < len(header) {
		return Record{}, r.errorf(line, "%d columns, want at least 4 (at,key,size,outcome)", len(r.fields))
	}
	at, err := parseSeconds(r.fields[0])
	if err != nil {
		return Record{}, r.errorf(line, "at %q: %v", r.fields[0], err)
	}
	if at < r.last && !r.unordered {
		return Record{}, r.errorf(line, "at %s is before the previous row's %s: rows must be in time order", r.fields[0], seconds(r.last))
	}
	key := r.fields[1]
	if len(key) == 0 || len(key) > MaxKeyLen {
		return Record{}, r.errorf(line, "key of %d bytes: want 1 to %d", len(key), MaxKeyLen)
	}
	size, err := strconv.Atoi(string(r.fields[2]))
	if err != nil || size < 0 {
		return Record{}, r.errorf(line, "size %q: want a whole number of bytes", r.fields[2])
	}
	var o Outcome
	if err := o.UnmarshalText(r.fields[3]); err != nil {
		return Record{}, r.errorf(line, "outcome %q: want accepted, rejected, deferred, limited, unavailable, invalid or nothing", r.fields[3])
	}
	r.last = at
	return Record{At: at, Key: string(key), Size: size, Outcome: o}, nil
}

func (r *Reader) errorf(line int, format string, args ...any) error {
	return fmt.Errorf("traffic: %w: line %d: %s", ErrFormat, line, fmt.Sprintf(format, args...))
}

// parseSeconds parses a time of the format: seconds, with at most six
// digits after the point.
func parseSeconds(b []byte) (time.Duration, error) {
	whole, frac, dot := bytes.Cut(b, []byte("."))
	if len(whole) == 0 || len(whole) > 10 || (dot && (len(frac) == 0 || len(frac) > 6)) {
		return 0, errors.New("want seconds since the start, with at most 6 digits after the point")
	}
	var s, us int64
	for _, c := range whole {
		if c < '0' || c > '9' {
			return 0, errors.New("want seconds since the start, a number ≥ 0")
		}
		s = s*10 + int64(c-'0')
	}
	for i := range 6 {
		us *= 10
		if i < len(frac) {
			c := frac[i]
			if c < '0' || c > '9' {
				return 0, errors.New("want seconds since the start, a number ≥ 0")
			}
			us += int64(c - '0')
		}
	}
	return time.Duration(s)*time.Second + time.Duration(us)*time.Microsecond, nil
}

// seconds formats d as the format writes times.
func seconds(d time.Duration) string { return string(appendSeconds(nil, d)) }
