package main

import (
	"bytes"
	"cmp"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/urfave/cli/v2"

	"github.com/shaper-dev/shaper/internal/cmdline"
	"github.com/shaper-dev/shaper/shaper/client"
	"github.com/shaper-dev/shaper/shaper/traffic"
)

func recordCommand() *cli.Command {
	return &cli.Command{
		Name:  "record",
		Usage: "record the submissions of a policy from every running shaper into a trace (for shaper tune)",
		Description: `Asks every shaper on the NATS server to record the policy's submissions (over
shaper.record.<policy>) and writes them as a trace: CSV with the columns
at,key,size,outcome, at in seconds since the recording started. Shapers record
only while asked, so a shaper nobody records pays nothing for it.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "policy", Required: true, Usage: "`NAME` of the policy to record"},
			&cli.DurationFlag{Name: "duration", Value: 10 * time.Minute, Usage: "record for `D` (0: until interrupted)"},
			&cli.StringFlag{Name: "out", Value: "-", Usage: "write the trace to `FILE` (- for stdout)"},
			&cli.StringFlag{Name: "nats-url", Value: "nats://127.0.0.1:4222", Usage: "NATS server `URL` the shapers use", EnvVars: envVar("nats-url")},
			&cli.StringFlag{Name: "nats-creds", Usage: "credentials `FILE` (.creds) for --nats-url", EnvVars: envVar("nats-creds")},
		},
		Action: runRecord,
	}
}

// reorderWindow is how long rows wait to be written: rows come from several
// shapers, each in the order it decided them, and are written in time
// order once nothing earlier can come.
const reorderWindow = 3 * time.Second

func runRecord(c *cli.Context) error {
	policy, d := c.String("policy"), c.Duration("duration")
	if d < 0 {
		return cli.Exit(fmt.Sprintf("record: --duration %s is negative", d), 2)
	}
	opts := []nats.Option{nats.Name("shaper record"), nats.MaxReconnects(-1)}
	if f := c.String("nats-creds"); f != "" {
		opts = append(opts, nats.UserCredentials(f))
	}
	nc, err := nats.Connect(c.String("nats-url"), opts...)
	if err != nil {
		return fmt.Errorf("record: --nats-url %s: %w", c.String("nats-url"), err)
	}
	defer nc.Close()
	n, err := client.NewNATS(nc, client.NATSConfig{})
	if err != nil {
		return fmt.Errorf("record: %w", err)
	}
	out := c.App.Writer
	if path := c.String("out"); path != "-" {
		f, err := os.Create(path)
		if err != nil {
			return fmt.Errorf("record: --out: %w", err)
		}
		defer f.Close()
		out = f
	}
	ctx := c.Context
	if d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	rec := newRecording(out, policy, time.Now(), d)
	stats, err := n.Record(ctx, policy, rec.add)
	if errors.Is(err, client.ErrUnknownPolicy) { // a bad command line, as for the commands asking over HTTP
		return cli.Exit("shaper record: --policy: "+strings.TrimPrefix(err.Error(), "client: "), cmdline.ExitUsage)
	}
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("record: %w", err)
	}
	if err := rec.close(); err != nil {
		return fmt.Errorf("record: %w", err)
	}
	shapers := fmt.Sprintf("%d shapers", stats.Shapers)
	if stats.Shapers == 1 {
		shapers = "1 shaper"
	}
	span := time.Since(rec.origin) // the rows after --duration are not written: nor is the time it took to stop
	if d > 0 {
		span = min(span, d)
	}
	fmt.Fprintf(c.App.ErrWriter, "record: %d submissions of policy %s from %s over %s (%s); %d lost, %d written late\n",
		rec.written, policy, shapers, span.Round(time.Second), rec.outcomes(), stats.Lost, rec.late)
	return nil
}

// recording turns the batches of a recording into a trace: it orders the
// rows of the last reorderWindow and writes the older ones.
type recording struct {
	w        *traffic.Writer
	origin   time.Time     // at 0 of the trace
	end      time.Duration // rows after it are not written; 0: no end
	pending  rowHeap
	newest   time.Duration // the latest row seen
	last     time.Duration // the latest row written
	written  int
	late     int // rows that came after later ones were written (written at that time)
	byResult map[traffic.Outcome]int
	err      error
}

func newRecording(w io.Writer, policy string, origin time.Time, d time.Duration) *recording {
	span := "until interrupted"
	if d > 0 {
		span = "for " + d.String()
	}
	return &recording{
		w:        traffic.NewWriter(w, fmt.Sprintf("shaper trace of policy %s, recorded by shaper record from %s %s", policy, origin.UTC().Format(time.RFC3339Nano), span)),
		origin:   origin,
		end:      d,
		byResult: make(map[traffic.Outcome]int),
	}
}

// add takes one batch (called by client.NATS.Record, one at a time).
func (r *recording) add(b client.RecordBatch) {
	rows := traffic.NewRowReader(bytes.NewReader(b.Rows))
	for {
		rec, err := rows.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			r.err = cmp.Or(r.err, fmt.Errorf("a batch of %s: %w", b.Instance, err))
			return
		}
		rec.At = max(time.Unix(0, int64(rec.At)).Sub(r.origin), 0)
		if r.end > 0 && rec.At > r.end {
			continue
		}
		heap.Push(&r.pending, rec)
		r.newest = max(r.newest, rec.At)
	}
	r.writeUntil(r.newest - reorderWindow)
}

// writeUntil writes the pending rows up to at.
func (r *recording) writeUntil(at time.Duration) {
	for r.pending.Len() > 0 && r.pending[0].At <= at {
		rec := heap.Pop(&r.pending).(traffic.Record)
		if rec.At < r.last {
			rec.At = r.last
			r.late++
		}
		if err := r.w.Write(rec); err != nil {
			r.err = cmp.Or(r.err, err)
			continue
		}
		r.last = rec.At
		r.written++
		r.byResult[rec.Outcome]++
	}
}

// close writes what is pending and flushes.
func (r *recording) close() error {
	r.writeUntil(r.newest)
	return errors.Join(r.err, r.w.Flush())
}

// outcomes says how the written submissions were answered.
func (r *recording) outcomes() string {
	var b bytes.Buffer
	for _, o := range traffic.Outcomes()[1:] {
		if n := r.byResult[o]; n > 0 {
			if b.Len() > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s %d", o, n)
		}
	}
	if b.Len() == 0 {
		return "none"
	}
	return b.String()
}

// rowHeap orders records by time.
type rowHeap []traffic.Record

func (h rowHeap) Len() int           { return len(h) }
func (h rowHeap) Less(i, j int) bool { return h[i].At < h[j].At }
func (h rowHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *rowHeap) Push(x any)        { *h = append(*h, x.(traffic.Record)) }
func (h *rowHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
