package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/cmdline"

	"github.com/shaper-dev/shaper/shaper/traffic"
)

func readTrace(t *testing.T, path string) ([]traffic.Record, []string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := traffic.NewReader(f)
	var out []traffic.Record
	for {
		rec, err := r.Read()
		if err == io.EOF {
			return out, r.Comments()
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rec)
	}
}

func TestTraceCommand(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.csv")
	if _, err := runCLI(t, t.Context(), "trace", "--duration", "20s", "--rate", "50/s", "--keys", "10", "--zipf", "1.5",
		"--burst-every", "10s", "--burst-for", "1s", "--burst-rate", "500", "--size", "7", "--seed", "3", "--out", path); err != nil {
		t.Fatal(err)
	}
	recs, comments := readTrace(t, path)
	// 18 s at 50/s and 2 s at 500/s: about 1,900.
	if n := len(recs); n < 1700 || n > 2100 {
		t.Errorf("%d submissions, want about 1,900", n)
	}
	inBursts := 0
	for _, r := range recs {
		if r.Size != 7 || r.At >= 20*time.Second || !strings.HasPrefix(r.Key, "k") {
			t.Fatalf("record %+v: want size 7, key k…, within 20 s", r)
		}
		if r.At%(10*time.Second) < time.Second {
			inBursts++
		}
	}
	if inBursts < 800 {
		t.Errorf("%d submissions in the two 1 s bursts, want about 1,000", inBursts)
	}
	if len(comments) != 1 || !strings.Contains(comments[0], "Poisson arrivals at 50/s over 10 keys (zipf 1.5), bursts of 500/s for 1s every 10s") {
		t.Errorf("comments %q", comments)
	}
	// Each refusal names the flag, never the package that checked it.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--rate", "fast"}, `--rate: "fast" is not a rate`},
		{[]string{"--burst-every", "10s"}, "a burst needs --burst-every, --burst-for and --burst-rate"},
		{[]string{"--zipf", "0.5"}, "producer trace: --zipf 0.5: want an exponent above 1"},
		{[]string{"--keys", "0"}, "producer trace: --keys 0: want at least 1"},
		{[]string{"--duration", "0s", "--size", "-1"}, "producer trace: --duration 0s: want a positive duration; --size -1: want a number of bytes ≥ 0"},
		{[]string{"--rate", "0"}, "producer trace: --rate 0 and no burst: the trace would be empty"},
		{[]string{"--burst-every", "1s", "--burst-for", "2s", "--burst-rate", "5"}, "producer trace: --burst-for 2s, --burst-every 1s: want a burst no longer than its period"},
		{[]string{"--diurnal-period", "1h", "--diurnal-amplitude", "2"}, "producer trace: --diurnal-amplitude 2: want an amplitude from 0 to 1"},
	} {
		_, err := runCLI(t, t.Context(), append([]string{"trace", "--out", path}, tc.args...)...)
		if cmdline.ExitCode(err) != cmdline.ExitUsage || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "synth") {
			t.Errorf("trace %q: %v, want exit 2 saying %q", tc.args, err, tc.want)
		}
	}
}

// send --trace submits each job of a trace at its time (sped up) from
// --start-at, with its key and size.
func TestSendTrace(t *testing.T) {
	type got struct {
		key  string
		size int
		at   time.Duration
	}
	var (
		mu    sync.Mutex
		seen  []got
		start time.Time
	)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/jobs/{policy}/{key}", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, got{r.PathValue("key"), len(body), time.Since(start)})
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprintf(w, `{"id":"j","policy":"p","key":%q,"queued":1,"eta_ms":0}`, r.PathValue("key"))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	path := filepath.Join(t.TempDir(), "t.csv")
	os.WriteFile(path, []byte("at,key,size,outcome\n0,a,3,\n1.0,b c,0,rejected\n2.5,a,5,\n"), 0o644)
	start = time.Now().Add(300 * time.Millisecond)
	out, err := runCLI(t, t.Context(), "send", "--http", srv.URL, "--policy", "p", "--trace", path, "--speed", "5", "--json",
		"--start-at", start.Format(time.RFC3339Nano))
	if err != nil {
		t.Fatal(err)
	}
	s := decodeSendSummary(t, out)
	if s.Sent != 3 || s.Keys != 2 || s.Outcomes["queued"] != 3 || s.LateMs == nil || s.Trace != path {
		t.Errorf("summary %+v, want 3 sent over 2 keys, lateness reported", s)
	}
	want := []got{{"a", 3, 0}, {"b c", 0, 200 * time.Millisecond}, {"a", 5, 500 * time.Millisecond}}
	if len(seen) != len(want) {
		t.Fatalf("the server saw %+v, want %+v", seen, want)
	}
	for i, g := range seen {
		// On time at 5× speed, within what a loaded machine allows.
		if g.key != want[i].key || g.size != want[i].size || g.at < want[i].at || g.at > want[i].at+150*time.Millisecond {
			t.Errorf("submission %d: %+v, want %+v (within 150 ms)", i, g, want[i])
		}
	}
	for _, args := range [][]string{{"--jobs", "5"}, {"--keys", "2"}, {"--rate", "1/s"}, {"--size", "1"}, {"--speed", "0"}, {"--start-at", "soon"}} {
		if _, err := runCLI(t, t.Context(), append([]string{"send", "--http", srv.URL, "--policy", "p", "--trace", path}, args...)...); err == nil {
			t.Errorf("send --trace with %q: no error", args)
		}
	}
	bad := filepath.Join(t.TempDir(), "bad.csv")
	os.WriteFile(bad, []byte("at,key,size,outcome\n1,a,1,\n0,a,1,\n"), 0o644)
	if _, err := runCLI(t, t.Context(), "send", "--http", srv.URL, "--policy", "p", "--trace", bad); err == nil || !strings.Contains(err.Error(), "line 3") {
		t.Errorf("a trace going back in time: %v, want an error naming line 3", err)
	}
}
