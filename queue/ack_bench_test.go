package queue_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkAckRemoval is BenchmarkRead/remove's alternative, measured the
// same way: the same jobs in a work-queue stream (per-key subjects, as a
// queue's), read by a pull consumer before the timer starts, each removed
// by acknowledging it, the ack confirmed (ack) or not (ack-async: the
// timer stops once the stream is empty). It is what the drain's removal
// would cost if the queue were a work-queue stream read by a consumer:
// compare its cpu-µs/op with BenchmarkRead/remove's in the same run.
func BenchmarkAckRemoval(b *testing.B) {
	for _, what := range []string{"ack", "ack-async"} {
		b.Run(what, func(b *testing.B) {
			js, _ := benchQueue(b)
			ctx := context.Background()
			s, err := js.CreateStream(ctx, jetstream.StreamConfig{
				Name: "WQ", Subjects: []string{"wq.>"}, Storage: jetstream.FileStorage, Retention: jetstream.WorkQueuePolicy,
			})
			if err != nil {
				b.Fatal(err)
			}
			for i := range b.N {
				if _, err := js.PublishAsync(fmt.Sprintf("wq.k%d", i%benchKeys), benchPayload); err != nil {
					b.Fatal(err)
				}
			}
			<-js.PublishAsyncComplete()
			c, err := s.CreateConsumer(ctx, jetstream.ConsumerConfig{
				Durable: "drain", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Hour, MaxAckPending: -1,
			})
			if err != nil {
				b.Fatal(err)
			}
			msgs := make([]jetstream.Msg, 0, b.N)
			for len(msgs) < b.N {
				batch, err := c.Fetch(min(b.N-len(msgs), 1000), jetstream.FetchMaxWait(5*time.Second))
				if err != nil {
					b.Fatal(err)
				}
				for m := range batch.Messages() {
					msgs = append(msgs, m)
				}
				if err := batch.Error(); err != nil {
					b.Fatal(err)
				}
			}
			cpuPerOp(b, func(i int) error {
				if what == "ack" {
					return msgs[i].DoubleAck(ctx)
				}
				return msgs[i].Ack()
			}, func() {
				for what == "ack-async" {
					if info, err := s.Info(ctx); err != nil || info.State.Msgs == 0 {
						return
					}
					time.Sleep(time.Millisecond)
				}
			})
		})
	}
}
