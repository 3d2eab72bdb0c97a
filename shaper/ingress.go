package shaper

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/shaper-dev/shaper/queue"
)

// subscribeIngress listens for submissions on <submit subject>.<policy>.<key
// token>, in a queue group so that several shapers share them. The raw key
// may also come in the Shaper-Key header (it must then encode to the token).
func (s *Shaper) subscribeIngress() (*nats.Subscription, error) {
	root := s.cfg.SubmitSubject + "."
	sem := make(chan struct{}, DefaultIngressWorkers)
	sub, err := s.nc.QueueSubscribe(root+">", "shaper", func(m *nats.Msg) {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			o := s.submitNATS(m, root)
			if m.Reply == "" {
				return
			}
			b, _ := json.Marshal(o)
			if err := m.Respond(b); err != nil {
				s.log.Debug("nats ingress reply", "err", err)
			}
		}()
	})
	if err != nil {
		return nil, fmt.Errorf("shaper: subscribe %s>: %w", root, err)
	}
	sub.SetPendingLimits(-1, 256<<20)
	// Subscribe only queues the interest: make sure the server has it before
	// the shaper says it is ready, or the first requests find no responders.
	if err := s.nc.FlushTimeout(s.cfg.Timeout); err != nil {
		sub.Unsubscribe()
		return nil, fmt.Errorf("shaper: subscribe %s>: %w", root, err)
	}
	return sub, nil
}

func (s *Shaper) submitNATS(m *nats.Msg, root string) outcome {
	rest := strings.TrimPrefix(m.Subject, root)
	policy, token, ok := strings.Cut(rest, ".")
	if !ok || token == "" || strings.Contains(token, ".") {
		return failed(400, "bad subject "+quote(m.Subject)+": want "+root+"<policy>.<key>")
	}
	key := m.Header.Get(queue.HeaderKey)
	if key == "" {
		var err error
		if key, err = queue.DecodeKey(token); err != nil {
			return failed(400, err.Error())
		}
	} else if enc, err := queue.EncodeKey(key); err != nil {
		return failed(400, err.Error())
	} else if enc != token {
		return failed(400, "Shaper-Key header does not match the subject's key token "+quote(token)+" (want "+quote(enc)+")")
	}
	o := s.submit(context.Background(), submission{
		policy:      policy,
		key:         key,
		payload:     m.Data,
		idempotency: m.Header.Get("Idempotency-Key"),
		traceparent: m.Header.Get(queue.HeaderTrace),
	})
	if o.Status == "" {
		o.Status = statusError
	}
	return o
}
