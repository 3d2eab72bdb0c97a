package traffic_test

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/shaper/traffic"
)

func readAll(t *testing.T, in string) ([]traffic.Record, *traffic.Reader, error) {
	t.Helper()
	r := traffic.NewReader(strings.NewReader(in))
	var out []traffic.Record
	for {
		rec, err := r.Read()
		if err == io.EOF {
			return out, r, nil
		}
		if err != nil {
			return out, r, err
		}
		out = append(out, rec)
	}
}

func TestWriteRead(t *testing.T) {
	recs := []traffic.Record{
		{At: 0, Key: "acme", Size: 64, Outcome: traffic.Accepted},
		{At: 13250 * time.Microsecond, Key: "tenant, ltd", Size: 120, Outcome: traffic.Rejected},
		{At: 13250 * time.Microsecond, Key: `say "hi"`, Size: 0, Outcome: traffic.Deferred},
		{At: time.Second, Key: "two\nlines", Size: 1, Outcome: traffic.Limited},
		{At: 3601*time.Second + time.Microsecond, Key: "ü", Size: 1 << 20, Outcome: traffic.Unknown},
		{At: 3602 * time.Second, Key: "acme", Size: 64, Outcome: traffic.Unavailable},
		{At: 3602 * time.Second, Key: "#x", Size: 64, Outcome: traffic.Invalid},
	}
	var buf bytes.Buffer
	w := traffic.NewWriter(&buf, "shaper trace of policy orders", "second\nand third")
	for _, r := range recs {
		if err := w.Write(r); err != nil {
			t.Fatalf("Write(%+v) = %v", r, err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	got, r, err := readAll(t, buf.String())
	if err != nil {
		t.Fatalf("reading back %q: %v", buf.String(), err)
	}
	if !slices.Equal(got, recs) {
		t.Errorf("read back %+v, want %+v", got, recs)
	}
	if want := []string{"shaper trace of policy orders", "second", "and third"}; !slices.Equal(r.Comments(), want) {
		t.Errorf("Comments() = %q, want %q", r.Comments(), want)
	}
	if !strings.HasPrefix(buf.String(), "# shaper trace of policy orders\n# second\n# and third\nat,key,size,outcome\n0.000000,acme,64,accepted\n0.013250,\"tenant, ltd\",120,rejected\n") {
		t.Errorf("written trace starts %q", buf.String()[:min(buf.Len(), 200)])
	}
}

func TestReadLenient(t *testing.T) {
	in := "\ufeffat,key,size,outcome,shaper\r\n# a comment\r\n\r\n1,a,2,,extra\r\n1.5,b,3,accepted\n2.000001,a,0,"
	got, _, err := readAll(t, in)
	if err != nil {
		t.Fatal(err)
	}
	want := []traffic.Record{
		{At: time.Second, Key: "a", Size: 2},
		{At: 1500 * time.Millisecond, Key: "b", Size: 3, Outcome: traffic.Accepted},
		{At: 2*time.Second + time.Microsecond, Key: "a"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("read %+v, want %+v", got, want)
	}
}

func TestReadErrors(t *testing.T) {
	const h = "at,key,size,outcome\n"
	for _, tc := range []struct{ name, in, want string }{
		{"empty", "", "no header row"},
		{"only comments", "# x\n", "no header row"},
		{"bad header", "time,key,size,outcome\n", `column 1 is "time", want "at"`},
		{"short header", "at,key\n", "want at least the columns"},
		{"time goes back", h + "2,a,1,\n1,a,1,\n", "line 3: at 1 is before the previous row's 2.000000"},
		{"negative time", h + "-1,a,1,\n", "line 2: at"},
		{"seven digits", h + "0.1234567,a,1,\n", "at most 6 digits"},
		{"empty time", h + ",a,1,\n", "line 2: at"},
		{"bad size", h + "0,a,x,\n", `line 2: size "x"`},
		{"negative size", h + "0,a,-1,\n", `size "-1"`},
		{"empty key", h + "0,,1,\n", "key of 0 bytes"},
		{"long key", h + "0," + strings.Repeat("k", 257) + ",1,\n", "key of 257 bytes"},
		{"bad outcome", h + "0,a,1,ok\n", `outcome "ok"`},
		{"few columns", h + "0,a,1\n", "3 columns"},
		{"unclosed quote", h + "0,\"a,1,\n", "line 2: a quoted field is not closed"},
		{"stray quote", h + "0,a\"\"b,1,\n", "double quote in an unquoted field"},
		{"text after quote", h + "0,\"a\"b,1,\n", "text after a quoted field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := readAll(t, tc.in)
			if !errors.Is(err, traffic.ErrFormat) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("reading %q: error %v, want ErrFormat saying %q", tc.in, err, tc.want)
			}
		})
	}
}

func TestWriteRefuses(t *testing.T) {
	w := traffic.NewWriter(io.Discard)
	if err := w.Write(traffic.Record{At: time.Second, Key: "a"}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []traffic.Record{
		{At: time.Millisecond, Key: "a"},
		{At: 2 * time.Second, Key: ""},
		{At: 2 * time.Second, Key: strings.Repeat("k", 257)},
		{At: 2 * time.Second, Key: "a", Size: -1},
		{At: 2 * time.Second, Key: "a", Outcome: traffic.Outcome(99)},
	} {
		if err := w.Write(r); err == nil {
			t.Errorf("Write(%+v) = nil, want an error", r)
		}
	}
}

func FuzzReader(f *testing.F) {
	f.Add("at,key,size,outcome\n0.5,\"a,\"\"b\"\"\",3,accepted\n1,c,0,\n")
	f.Add("# c\nat,key,size,outcome,x\n1,k,1,rejected,y\n")
	f.Fuzz(func(t *testing.T, in string) {
		recs, _, err := readAll(t, in)
		if err != nil {
			if !errors.Is(err, traffic.ErrFormat) {
				t.Fatalf("reading %q: %v, want an ErrFormat", in, err)
			}
			return
		}
		// What reads writes back to the same records.
		var buf bytes.Buffer
		w := traffic.NewWriter(&buf)
		for _, r := range recs {
			if err := w.Write(r); err != nil {
				t.Fatalf("Write(%+v) of a record read from %q: %v", r, in, err)
			}
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		again, _, err := readAll(t, buf.String())
		if err != nil || !slices.Equal(again, recs) {
			t.Fatalf("round trip of %q: %+v, %v; want %+v", in, again, err, recs)
		}
	})
}
