package shaper_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/shaper"
)

// A policy delivering under the shaper's own NATS submissions (a submit
// subject of the Config's, which the policy file's check cannot know)
// would take its deliveries as submissions forever: New refuses it, and
// names the policy.
func TestDeliveriesUnderTheSubmitSubjectRefused(t *testing.T) {
	for _, c := range []struct{ submit, policy, want string }{
		{"orders.in", "{name: p, outflow: 1/s, queue: 1, deliver: {subject: orders.in.p}}", `policy "p" delivers to orders.in.p`},
		{"orders.in", "{name: p, outflow: 1/s, queue: 1, deliver: {subject: orders}}", `policy "p" delivers to orders,`},
		{"shaper.out", "{name: p, outflow: 1/s, queue: 1}", `policy "p" delivers to shaper.out.p`}, // the default subject
	} {
		_, err := shaper.New(shaper.Config{SubmitSubject: c.submit, Policies: testenv.Policies(t, "policies:\n  - "+c.policy+"\n"), DataDir: t.TempDir()})
		var ce *shaper.ConfigError
		if !errors.As(err, &ce) || ce.Field != "SubmitSubject" || !strings.Contains(err.Error(), c.want) {
			t.Errorf("submit subject %s, %s: %v, want a SubmitSubject error saying %q", c.submit, c.policy, err, c.want)
		}
	}
	for _, policy := range []string{
		"{name: p, outflow: 1/s, queue: 1, deliver: {subject: orders.inbox}}",
		"{name: p, outflow: 1/s, queue: 1, deliver: {webhook: 'http://127.0.0.1:1/orders.in'}}",
	} {
		if _, err := shaper.New(shaper.Config{SubmitSubject: "orders.in", Policies: testenv.Policies(t, "policies:\n  - "+policy+"\n"), DataDir: t.TempDir()}); err != nil {
			t.Errorf("submit subject orders.in, %s: %v", policy, err)
		}
	}
}

// MaxStore sizes the embedded store only, and not below 1 MiB.
func TestMaxStoreChecked(t *testing.T) {
	set := testenv.Policies(t, "policies:\n  - {name: p, outflow: 1/s, queue: 1}\n")
	for _, c := range []struct {
		cfg  shaper.Config
		want string
	}{
		{shaper.Config{MaxStore: -1}, "want a positive size"},
		{shaper.Config{MaxStore: 1 << 10}, "1.0 KiB: want at least 1 MiB"},
		{shaper.Config{MaxStore: 1 << 30, NATSURL: "nats://127.0.0.1:4222"}, "applies to the embedded JetStream only: with an external server"},
	} {
		c.cfg.Policies = set
		_, err := shaper.New(c.cfg)
		var ce *shaper.ConfigError
		if !errors.As(err, &ce) || ce.Field != "MaxStore" || !strings.Contains(err.Error(), c.want) {
			t.Errorf("MaxStore %d: %v, want a MaxStore error saying %q", c.cfg.MaxStore, err, c.want)
		}
	}
}

// NATS credentials in a URL are not shown: the log and the banner print
// the URL redacted.
func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"nats://127.0.0.1:4222":                 "nats://127.0.0.1:4222",
		"nats://a:secret@127.0.0.1:4222":        "nats://a:xxxxx@127.0.0.1:4222",
		"nats://s3cr3t@127.0.0.1:4222":          "nats://xxxxx@127.0.0.1:4222",
		"nats://a:p@n1:4222,nats://a:p@n2:4222": "nats://a:xxxxx@n1:4222,nats://a:xxxxx@n2:4222",
		"nats://a:p%zz@n1:4222":                 "xxxxx@n1:4222",
		"127.0.0.1:4222":                        "127.0.0.1:4222",
	} {
		if got := shaper.RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}
