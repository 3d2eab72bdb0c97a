package queue_test

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/queue"
)

// benchParallelism × GOMAXPROCS goroutines publish at once in both
// benchmarks, so Admit and its baseline see the same concurrency.
const (
	benchParallelism = 16
	benchKeys        = 1000
)

var benchPayload = bytes.Repeat([]byte("x"), 128)

// BenchmarkAdmit compares queue.Admit (a synchronous JetStream publish with
// an id of its own, so a dedupe id and the job id header, into a DiscardNew per
// subject stream) with a raw synchronous js.Publish of the same payload to a
// plain stream on the same server.
func BenchmarkAdmit(b *testing.B) {
	js, q := benchQueue(b)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "RAW", Subjects: []string{"raw.>"}, Storage: jetstream.FileStorage,
	}); err != nil {
		b.Fatal(err)
	}
	keys := make([]string, benchKeys)
	raw := make([]string, benchKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
		raw[i] = "raw." + keys[i]
	}

	b.Run("raw-publish", func(b *testing.B) {
		var n atomic.Int64
		b.SetParallelism(benchParallelism)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := js.Publish(ctx, raw[n.Add(1)%benchKeys], benchPayload); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("admit", func(b *testing.B) {
		var n atomic.Int64
		b.SetParallelism(benchParallelism)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				job := queue.Job{ID: nuid.Next(), Key: keys[n.Add(1)%benchKeys], Payload: benchPayload}
				if _, err := q.Admit(ctx, job); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// benchQueue starts a JetStream server and opens a queue on it with room
// for a million jobs per key.
func benchQueue(b *testing.B) (jetstream.JetStream, *queue.Queue) {
	b.Helper()
	js, err := jetstream.New(testenv.Connect(b, testenv.NATS(b)), jetstream.WithPublishAsyncMaxPending(1024))
	if err != nil {
		b.Fatal(err)
	}
	q, err := queue.Open(context.Background(), js, "bench", 1_000_000, queue.Config{})
	if err != nil {
		b.Fatal(err)
	}
	return js, q
}
