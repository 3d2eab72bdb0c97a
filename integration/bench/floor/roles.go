package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/shaper/client"
)

// The roles are this program re-executed (os.Args[1] names the role), so
// that each has a process, and a CPU figure, of its own. Each speaks a
// line protocol: it says "ready" on stdout once it is set up, and ends when
// its stdin closes or on SIGTERM.
const (
	roleWorker   = "_worker"
	roleConsumer = "_consumer"
)

// say writes one protocol line to stdout.
var say = func() func(format string, a ...any) {
	var mu sync.Mutex
	w := bufio.NewWriter(os.Stdout)
	return func(format string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, format+"\n", a...)
		w.Flush()
	}
}()

// untilGo returns what untilEnd does, and a channel closed once "go"
// comes on stdin: the clock's start for a role that waits for it.
func untilGo() (<-chan struct{}, context.Context, context.CancelFunc) {
	start := make(chan struct{})
	var started sync.Once
	ctx, cancel := untilEnd(func(l string) {
		if l == "go" {
			started.Do(func() { close(start) })
		}
	})
	return start, ctx, cancel
}

// untilEnd returns a context ended by SIGTERM, SIGINT or the end of stdin,
// and calls each stdin line's handler first.
func untilEnd(lines func(string)) (context.Context, context.CancelFunc) {
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			lines(sc.Text())
		}
		cancel()
	}()
	return ctx, cancel
}

// runWorker is the floor's worker: a JetStream pull consumer on a
// work-queue stream that hands each message to the consumer as a NATS
// request on <out>.<key token>, with the headers a shaper delivery carries,
// waits for the reply and acknowledges the message, by default waiting for
// the server to confirm the ack (a double ack). It fetches nothing before
// "go" comes on stdin.
func runWorker(args []string) error {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	url := fs.String("nats-url", "", "NATS server URL")
	stream := fs.String("stream", "", "work-queue stream")
	in := fs.String("in", "", "subject prefix of the stream's messages: <in>.<key token>")
	out := fs.String("out", "", "subject prefix of the deliveries: <out>.<key token>")
	await := fs.Bool("await-ack", true, "wait for the server to confirm each ack")
	fetchers := fs.Int("fetchers", 32, "fetches (and so deliveries) in flight")
	batch := fs.Int("batch", 256, "messages per fetch")
	rate := fs.Int("rate", 0, "hand-offs a second, evenly spaced, over all fetches (0: as fast as it can)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	start, ctx, cancel := untilGo()
	defer cancel()
	nc, err := nats.Connect(*url, nats.Name("floor-worker"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, *stream, jetstream.ConsumerConfig{
		Durable:       "floor",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       time.Minute,
		MaxAckPending: 2 * *fetchers * *batch,
		MaxWaiting:    2 * *fetchers,
	})
	if err != nil {
		return fmt.Errorf("worker: consumer: %w", err)
	}
	w := worker{nc: nc, in: *in + ".", out: *out + ".", await: *await}
	say("ready")
	select { // fetch nothing before the clock starts
	case <-start:
	case <-ctx.Done():
		return nil
	}
	if *rate > 0 {
		return w.paced(ctx, cons, *rate, *fetchers, *batch)
	}
	var wg sync.WaitGroup
	for range *fetchers {
		wg.Go(func() {
			for ctx.Err() == nil {
				b, err := cons.Fetch(*batch, jetstream.FetchMaxWait(time.Second))
				if err != nil {
					log.Printf("worker: fetch: %v", err)
					time.Sleep(100 * time.Millisecond)
					continue
				}
				for m := range b.Messages() {
					w.deliver(ctx, m)
				}
				if err := b.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && ctx.Err() == nil {
					log.Printf("worker: fetch: %v", err)
				}
			}
		})
	}
	<-ctx.Done()
	nc.Close() // ends the fetches
	wg.Wait()
	return nil
}

// paced hands messages over at rate a second: one fetch at a time of
// batch messages, the n-th started once n/rate seconds have passed (checked
// every millisecond: a Go timer wakes no finer on Linux), at most inFlight
// awaiting their reply and ack at once.
func (w *worker) paced(ctx context.Context, cons jetstream.Consumer, rate, inFlight, batch int) error {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	start, released := time.Now(), 0
	slots := make(chan struct{}, inFlight)
	var wg sync.WaitGroup
	defer wg.Wait()
	for ctx.Err() == nil {
		b, err := cons.Fetch(batch, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			log.Printf("worker: fetch: %v", err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for m := range b.Messages() {
			for float64(released) >= time.Since(start).Seconds()*float64(rate) {
				select {
				case <-tick.C:
				case <-ctx.Done():
					return nil
				}
			}
			released++
			slots <- struct{}{}
			wg.Go(func() {
				w.deliver(ctx, m)
				<-slots
			})
		}
	}
	return nil
}

// worker hands fetched messages over to the consumer.
type worker struct {
	nc      *nats.Conn
	in, out string
	await   bool
}

// deliver hands m to the consumer and acknowledges it once answered; a
// message not answered is handed back to the stream (nak).
func (w *worker) deliver(ctx context.Context, m jetstream.Msg) {
	md, err := m.Metadata()
	if err != nil {
		log.Printf("worker: metadata: %v", err)
		return
	}
	token := strings.TrimPrefix(m.Subject(), w.in)
	h := nats.Header{
		client.HeaderJobID:      {strconv.FormatUint(md.Sequence.Stream, 10)},
		client.HeaderPolicy:     {"floor"},
		client.HeaderKey:        {token},
		client.HeaderEnqueuedAt: {md.Timestamp.UTC().Format(time.RFC3339Nano)},
		client.HeaderAttempt:    {strconv.FormatUint(md.NumDelivered, 10)},
	}
	if _, err := w.nc.RequestMsg(&nats.Msg{Subject: w.out + token, Data: m.Data(), Header: h}, time.Minute); err != nil {
		if ctx.Err() == nil {
			log.Printf("worker: deliver: %v", err)
			m.Nak()
		}
		return
	}
	if w.await {
		err = m.DoubleAck(ctx)
	} else {
		err = m.Ack()
	}
	if err != nil && ctx.Err() == nil {
		log.Printf("worker: ack: %v", err)
	}
}

// runConsumer answers every request on a subject with an empty reply, the
// way a consumer takes a confirmed delivery. It holds the first requests
// unanswered until "go" comes on stdin, so that the deliverer's pipeline
// is full when the clock starts. It says "first" when the first request
// arrives, "done <deliveries> <duplicates>" once it has answered -expect
// distinct job ids (Shaper-Job-Id), and "mark <deliveries> <duplicates>"
// for each "mark" on stdin.
func runConsumer(args []string) error {
	fs := flag.NewFlagSet("consumer", flag.ContinueOnError)
	url := fs.String("nats-url", "", "NATS server URL")
	subject := fs.String("subject", "", "subject to answer requests on")
	expect := fs.Int("expect", 0, "say done after this many distinct job ids (0: never)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var (
		mu         sync.Mutex
		seen       = map[string]struct{}{}
		count, dup int
		first      sync.Once
		open       = make(chan struct{})
		opened     sync.Once
	)
	report := func(word string) {
		mu.Lock()
		c, d := count, dup
		mu.Unlock()
		say("%s %d %d", word, c, d)
	}
	ctx, cancel := untilEnd(func(l string) {
		switch l {
		case "go":
			opened.Do(func() { close(open) })
		case "mark":
			report("mark")
		}
	})
	defer cancel()
	nc, err := nats.Connect(*url, nats.Name("floor-consumer"))
	if err != nil {
		return err
	}
	defer nc.Close()
	sub, err := nc.Subscribe(*subject, func(m *nats.Msg) {
		first.Do(func() { say("first") })
		<-open
		if err := m.Respond(nil); err != nil {
			log.Printf("consumer: respond: %v", err)
			return
		}
		id := m.Header.Get(client.HeaderJobID)
		mu.Lock()
		count++
		if _, ok := seen[id]; ok {
			dup++
		} else {
			seen[id] = struct{}{}
		}
		done := len(seen) == *expect && !(*expect == 0)
		mu.Unlock()
		if done {
			report("done")
		}
	})
	if err != nil {
		return err
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return err
	}
	if err := nc.Flush(); err != nil {
		return err
	}
	say("ready")
	<-ctx.Done()
	return nil
}

// runRole runs the role named by args[0], if any, and reports whether it
// did.
func runRole(args []string, stderr io.Writer) (bool, error) {
	if len(args) == 0 {
		return false, nil
	}
	log.SetOutput(stderr)
	switch args[0] {
	case roleWorker:
		return true, runWorker(args[1:])
	case roleConsumer:
		return true, runConsumer(args[1:])
	case roleHandoff:
		return true, runHandoff(args[1:])
	}
	return false, nil
}
