package shaper

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/shaper-dev/shaper/shaper/client"
	"github.com/shaper-dev/shaper/shaper/internal/httpapi"
	"github.com/shaper-dev/shaper/shaper/internal/jobs"
)

// answerJobs answers job status requests over NATS, on
// client.DefaultJobSubject.<id>, as GET /v1/jobs/{id} does over HTTP: a
// producer that submits over NATS follows its jobs without HTTP. One
// shaper of the queue group answers each.
func (s *Shaper) answerJobs(nc *nats.Conn) error {
	root := client.DefaultJobSubject + "."
	_, err := nc.QueueSubscribe(root+"*", "shaper", func(m *nats.Msg) {
		if m.Reply == "" {
			return
		}
		id := strings.TrimPrefix(m.Subject, root)
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
		defer cancel()
		rec, err := s.jobs.Answer(ctx, id, s.policies.jobDrain())
		var b []byte
		switch {
		case err == nil:
			b, _ = json.Marshal(rec)
		case errors.Is(err, jobs.ErrNotFound):
			b, _ = json.Marshal(client.JobError{Code: 404, Error: "no job " + httpapi.Quote(id) + " (unknown, or past the horizon of job status)"})
		default:
			b, _ = json.Marshal(client.JobError{Code: 503, Error: "job status unavailable: " + err.Error()})
		}
		m.Respond(b)
	})
	return err
}
