package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/shaper-dev/shaper/integration/bench/internal/benchkit"
	"github.com/shaper-dev/shaper/shaper/client"
)

// roleHandoff is the bare paced hand-off: nothing stored, nothing read or
// removed, only what any paced and confirmed delivery over NATS must do:
// wake at each slot and send one request, with the headers and payload of
// a shaper delivery, whose reply confirms it.
const roleHandoff = "_handoff"

// runHandoff is the hand-off role. It sends -rate requests a second over
// -keys subjects <out>.k<i>: with -aligned, every key's at once at each
// period (-keys/-rate), one timer wake-up for them all, as a shaper's keys
// whose slots fall together; otherwise evenly spaced, each at its own
// instant (one wake-up per hand-off, as keys whose slots are spread). It
// takes the
// replies on one wildcard subscription, the cheapest way nats.go has to
// wait for many. Without -nats-url it runs a nats-server in its own
// process and talks to it in-process, as shaper serve does with its
// embedded JetStream, and says "ready <its URL>" for the consumer;
// otherwise "ready". It sends nothing before "go" comes on stdin.
func runHandoff(args []string) error {
	fs := flag.NewFlagSet("handoff", flag.ContinueOnError)
	url := fs.String("nats-url", "", "NATS server URL (none: an embedded nats-server)")
	out := fs.String("out", "", "subject prefix of the hand-offs: <out>.k<i>")
	keys := fs.Int("keys", 100, "keys the hand-offs go round")
	rate := fs.Int("rate", 1500, "hand-offs a second")
	payload := fs.Int("payload", 100, "payload bytes")
	aligned := fs.Bool("aligned", false, "every key's hand-off at once, each period")
	if err := fs.Parse(args); err != nil {
		return err
	}
	start, ctx, cancel := untilGo()
	defer cancel()
	opts := []nats.Option{nats.Name("floor-handoff")}
	ready := "ready"
	if *url == "" {
		ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true})
		if err != nil {
			return err
		}
		go ns.Start()
		if !ns.ReadyForConnections(10 * time.Second) {
			return fmt.Errorf("handoff: the embedded nats-server did not start")
		}
		defer ns.Shutdown()
		opts = append(opts, nats.InProcessServer(ns))
		ready = "ready " + ns.ClientURL()
	}
	nc, err := nats.Connect(*url, opts...)
	if err != nil {
		return err
	}
	defer nc.Close()
	inbox := nc.NewInbox()
	var answered atomic.Int64
	if _, err := nc.Subscribe(inbox+".*", func(*nats.Msg) { answered.Add(1) }); err != nil {
		return err
	}
	if err := nc.Flush(); err != nil {
		return err
	}
	say(ready)
	select {
	case <-start:
	case <-ctx.Done():
		return nil
	}
	data := make([]byte, *payload)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	begin := time.Now()
	for n := 0; ; n++ {
		slot := n
		if *aligned {
			slot = n / *keys * *keys // the period's first hand-off
		}
		at := begin.Add(time.Duration(float64(slot) / float64(*rate) * float64(time.Second)))
		if d := time.Until(at); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-ctx.Done():
				return nil
			}
		} else if ctx.Err() != nil {
			return nil
		}
		id := strconv.Itoa(n)
		h := nats.Header{
			client.HeaderJobID:      {id},
			client.HeaderPolicy:     {"floor"},
			client.HeaderKey:        {"k" + strconv.Itoa(n%*keys)},
			client.HeaderEnqueuedAt: {begin.UTC().Format(time.RFC3339Nano)},
			client.HeaderAttempt:    {"1"},
		}
		m := &nats.Msg{Subject: *out + ".k" + strconv.Itoa(n%*keys), Reply: inbox + "." + id, Header: h, Data: data}
		if err := nc.PublishMsg(m); err != nil && ctx.Err() == nil {
			return fmt.Errorf("handoff: %w", err)
		}
	}
}

// handoffPaced measures the bare paced hand-off at the paced runs' rate,
// keys aligned or spread, on the floor's nats-server (ns at url, server side nats-server + the
// sender), or with its own embedded nats-server (ns nil: server side the
// sender's process alone, as for shaper serve).
func (b *bench) handoffPaced(ctx context.Context, name string, ns *benchkit.Proc, url string, aligned bool) (row, error) {
	cfg := b.cfg
	rate := cfg.pacedKeys * cfg.pacedRate
	args := []string{roleHandoff, "-out", name + ".out", "-keys", strconv.Itoa(cfg.pacedKeys), "-rate", strconv.Itoa(rate),
		"-payload", strconv.Itoa(cfg.payload), "-aligned=" + strconv.FormatBool(aligned)}
	if url != "" {
		args = append(args, "-nats-url", url)
	}
	h, err := b.g.StartRole(name+"-sender", b.self, args...)
	if err != nil {
		return row{}, err
	}
	defer h.Stop(5 * time.Second)
	rest, err := h.Expect(ctx, "ready", time.Minute)
	if err != nil {
		return row{}, err
	}
	server := []*benchkit.Proc{h}
	how := "slots spread (evenly spaced)"
	if aligned {
		how = fmt.Sprintf("slots together (every key's at once, %d times a second)", cfg.pacedRate)
	}
	where := "on the floor's nats-server"
	if url == "" {
		url, where = rest, "embedded nats-server, as shaper serve"
	} else {
		server = append(server, ns)
	}
	what := fmt.Sprintf("hand-off alone, paced: %d requests/s, %s, each answered; nothing stored (%s)", rate, how, where)
	c, err := b.openConsumer(ctx, name+"-consumer", url, name+".out.>")
	if err != nil {
		return row{}, err
	}
	defer c.Stop(5 * time.Second)
	r, err := b.paced(ctx, what, c, server, func() error { return h.Send("go") }, func() error { return nil })
	r.bare = true
	return r, err
}
