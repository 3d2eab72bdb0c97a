package shaper_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/shaper/client"
)

// BenchmarkDirectLane compares the direct lane (client.Direct) with a raw
// JetStream PublishAsync in the same run, on the same embedded server of a
// real Shaper (file storage), with the same connection settings, over
// benchKeys subjects, each waiting for every ack:
//
//	raw-async     js.PublishAsync to a plain stream (no per-subject limit, nothing watching it)
//	lane          Direct.Publish into the bulk policy's queue (its per-key limit, its drain's watch)
//	lane-results  the same, with every job's Result read (its id, or a refusal) as a producer would
//
// ns/op is wall time over b.N jobs; cpu-µs/op the whole process's CPU
// (client, server, the shaper's drain) per job.
func BenchmarkDirectLane(b *testing.B) {
	s := benchShaper(b)
	nc, err := nats.Connect(s.NATSURL())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096), jetstream.WithPublishAsyncTimeout(30*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "RAW", Subjects: []string{"raw.>"}, Storage: jetstream.FileStorage}); err != nil {
		b.Fatal(err)
	}
	rawSubj := make([]string, benchKeys)
	keys := make([]string, benchKeys)
	for i := range keys {
		rawSubj[i], keys[i] = fmt.Sprintf("raw.k%d", i), fmt.Sprintf("k%d", i)
	}
	// Both wait as long as it takes for room in the 4096 unanswered.
	const stall = 30 * time.Second
	d, err := client.NewDirect(ctx, js, "bulk", client.DirectConfig{StallWait: stall})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(d.Close)
	complete := func(b *testing.B) {
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(30 * time.Second):
			b.Fatalf("%d acks missing after 30s", js.PublishAsyncPending())
		}
	}

	b.Run("raw-async", func(b *testing.B) {
		b.ReportAllocs()
		b.ResetTimer()
		cpu0 := cpuTime()
		for i := range b.N {
			if _, err := js.PublishAsync(rawSubj[i%benchKeys], benchPayload, jetstream.WithStallWait(stall)); err != nil {
				b.Fatal(err)
			}
		}
		complete(b)
		b.StopTimer()
		reportCPU(b, cpu0)
	})
	b.Run("lane", func(b *testing.B) {
		b.ReportAllocs()
		b.ResetTimer()
		cpu0 := cpuTime()
		for i := range b.N {
			if _, err := d.Publish(keys[i%benchKeys], benchPayload); err != nil {
				b.Fatal(err)
			}
		}
		complete(b)
		b.StopTimer()
		reportCPU(b, cpu0)
	})
	b.Run("lane-results", func(b *testing.B) {
		acks := make(chan client.Ack, 4096)
		done := make(chan error, 1)
		go func() {
			var bad error
			for a := range acks {
				if res, err := a.Result(ctx); bad == nil && (err != nil || res.Outcome != client.OutcomeAccepted || res.ID == "") {
					bad = fmt.Errorf("result %+v, %v; want accepted with an id", res, err)
				}
			}
			done <- bad
		}()
		b.ReportAllocs()
		b.ResetTimer()
		cpu0 := cpuTime()
		for i := range b.N {
			a, err := d.Publish(keys[i%benchKeys], benchPayload)
			if err != nil {
				b.Fatal(err)
			}
			acks <- a
		}
		close(acks)
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		reportCPU(b, cpu0)
	})
}
