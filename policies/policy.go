package policies

import "time"

// Overflow says what happens to a job submitted to a key whose queue is full.
type Overflow string

const (
	// OverflowReject answers 429 and drops the job: the producer must retry.
	OverflowReject Overflow = "reject"
	// OverflowDefer answers 429 and keeps the job in the deferred stream; it
	// is re-admitted when the key has room, or dead-lettered with its reason.
	OverflowDefer Overflow = "defer"
)

// Fail says what an admission limit does when its backend (Redis) fails.
type Fail string

const (
	// FailOpen admits within this shaper's local share of the limit (the
	// limit divided by the live shapers) until the backend answers again.
	FailOpen Fail = "open"
	// FailClosed refuses: the submission is answered 503.
	FailClosed Fail = "closed"
)

// Defaults applied by Parse and Set.With to fields a policy leaves out.
const (
	DefaultOverflow        = OverflowReject   // Policy.Overflow
	DefaultPartitions      = 1                // Policy.Partitions (zero)
	DefaultDeliverPrefix   = "shaper.out"     // deliveries go to DefaultDeliverPrefix.<policy>.<key>
	DefaultWebhookTimeout  = 10 * time.Second // Deliver.Timeout
	DefaultRetryAttempts   = 10               // Retry.Attempts
	DefaultRetryBackoff    = time.Second      // Retry.Backoff
	DefaultRetryMaxBackoff = time.Minute      // Retry.MaxBackoff
	DefaultRetryDeadline   = 24 * time.Hour   // Retry.Deadline
	DefaultRetryBudget     = Budget(0.2)      // Retry.Budget: 20 %
	DefaultAdmitFail       = FailOpen         // Admit.Fail
	DefaultConcurrencyKey  = 1                // Concurrency.Key: one delivery of a key at a time
	// MaxNameLen bounds a policy name, which becomes part of stream names and subjects.
	MaxNameLen = 64
)

// Policy is one validated entry of a policy file. The zero value is not a
// usable policy; obtain policies from Parse or Load, which fill in defaults,
// or build one and add it with Set.With, which does the same. A Policy is a
// value: copies share only the Admit pointer, which a Set never hands out.
type Policy struct {
	// Name identifies the policy in URLs and subjects: [A-Za-z0-9_-], at most MaxNameLen bytes.
	Name string `json:"name"`
	// Outflow is the fixed rate at which each key drains.
	Outflow Rate `json:"outflow"`
	// Queue is how many jobs each key holds at most (queued plus in delivery).
	Queue int `json:"queue"`
	// Overflow says what a full queue does with a new job.
	Overflow Overflow `json:"overflow"`
	// Total caps the outflow over all keys of the policy; the zero Rate means no cap.
	Total Rate `json:"total,omitzero"`
	// Partitions is how many parts the policy's keys are drained in: each
	// partition is drained by one shaper at a time, and the partitions are
	// shared out over the live shapers. A total cap is split into equal
	// shares. It cannot change while running. Zero means
	// DefaultPartitions: read it with Parts.
	Partitions int `json:"partitions,omitzero"`
	// Deliver says where drained jobs go.
	Deliver Deliver `json:"deliver"`
	// Retry bounds deferred re-admission and delivery retries.
	Retry Retry `json:"retry"`
	// Admit is an optional admission limit checked before the queue; nil means none.
	Admit *Admit `json:"admit,omitempty"`
	// Adapt is an optional adaptive outflow; nil means the fixed outflow.
	Adapt *Adapt `json:"adapt,omitempty"`
	// Concurrency bounds the deliveries awaiting their receipt at once.
	Concurrency Concurrency `json:"concurrency"`
	// Line is the line of the policy file on which this policy starts (0 when not from a file).
	Line int `json:"-"`
}

// DeliverMode is how a job is handed to NATS consumers.
type DeliverMode string

// Delivery modes of a NATS subject (not of a stream or a webhook).
const (
	// DeliverConfirm sends each job as a NATS request: it leaves the queue
	// only when a consumer replied (at least once). No consumer online
	// ("no responders") is neither an attempt nor a failure: the job waits.
	// The default.
	DeliverConfirm DeliverMode = "confirm"
	// DeliverPublish publishes each job and forgets it (at most once): a job
	// nobody was subscribed for is lost.
	DeliverPublish DeliverMode = "publish"
)

// Deliver is a policy's delivery target. Exactly one kind applies: a webhook
// when Webhook is set, else a NATS subject (published into Stream when set).
type Deliver struct {
	// Subject is the NATS subject prefix; a job of key k goes to Subject.<encoded k>.
	// Default: "shaper.out.<policy>".
	Subject string `json:"subject,omitempty"`
	// Stream, when set, names a JetStream stream that must capture Subject.>;
	// delivery then waits for the stream's acknowledgement.
	Stream string `json:"stream,omitempty"`
	// Mode is how jobs reach the subject's consumers when there is no
	// Stream: DeliverConfirm (the default) or DeliverPublish. Empty for a
	// stream or a webhook.
	Mode DeliverMode `json:"mode,omitempty"`
	// Webhook is an http(s) URL that receives each job as a POST.
	Webhook string `json:"webhook,omitempty"`
	// Timeout bounds one webhook or confirmed delivery. Default DefaultWebhookTimeout.
	Timeout time.Duration `json:"timeout,omitempty"`
}

// Retry bounds how often and how long a job is retried, for deferral and for
// failed deliveries alike (the two are counted apart).
type Retry struct {
	// Attempts is how many times a job is tried at most, at least 1.
	// Default DefaultRetryAttempts.
	Attempts int `json:"attempts"`
	// Backoff is the first retry delay; each further retry doubles it, with
	// full jitter. Default DefaultRetryBackoff.
	Backoff time.Duration `json:"backoff"`
	// MaxBackoff caps the retry delay; at least Backoff. Default DefaultRetryMaxBackoff.
	MaxBackoff time.Duration `json:"max_backoff"`
	// Deadline is how long after its first submission a job may still be
	// retried before it is dead-lettered. Default DefaultRetryDeadline.
	Deadline time.Duration `json:"deadline"`
	// Budget is the share of a key's delivery slots that retries of failed
	// deliveries may take while fresh jobs of the key wait (deferral is not
	// concerned), or BudgetOff. Default DefaultRetryBudget.
	Budget Budget `json:"budget"`
}

// Concurrency bounds the deliveries of a policy handed to the downstream
// and awaiting their receipt (a consumer's reply, a stream's or a
// webhook's acknowledgement) at once.
type Concurrency struct {
	// Key is how many deliveries of one key may await their receipt at
	// once, from 1 to MaxConcurrency. Default DefaultConcurrencyKey: a
	// key's next delivery starts once the previous one was answered.
	Key int `json:"key"`
	// Total is how many deliveries of the whole policy may await their
	// receipt at once, from 1 to MaxConcurrency and at least Key; split in
	// equal shares (rounded up) between the policy's partitions. 0, the
	// default, means no bound but the shaper's workers per policy.
	Total int `json:"total,omitzero"`
}

// Admit is an admission limit applied per key before a job reaches the queue.
type Admit struct {
	// Algorithm is one of the limiter package's algorithm names:
	// "gcra", "token_bucket", "fixed_window", "sliding_log", "sliding_window".
	Algorithm string `json:"algorithm"`
	// Limit is how many jobs per period a key may submit.
	Limit Rate `json:"limit"`
	// Burst is the bucket size of the two bucket algorithms: how many jobs an
	// idle key may submit at once (0 means Limit.N). The bucket refills at Limit.
	Burst int `json:"burst,omitempty"`
	// Shadow only counts what would be rejected, and admits it.
	Shadow bool `json:"shadow,omitempty"`
	// Fail is what to do when the limiter backend (Redis) fails: FailOpen
	// admits within this shaper's local share of the limit, FailClosed
	// rejects.
	Fail Fail `json:"fail"`
}

// DeliverSubject returns the subject prefix deliveries of p go to: Deliver.Subject,
// or DefaultDeliverPrefix.<name> when that is empty. It is meaningless for a
// webhook policy.
func (p Policy) DeliverSubject() string {
	if p.Deliver.Subject != "" {
		return p.Deliver.Subject
	}
	return DefaultDeliverPrefix + "." + p.Name
}

// Parts returns how many partitions the policy's keys are drained in:
// Partitions, or DefaultPartitions when it is zero.
func (p *Policy) Parts() int {
	if p.Partitions == 0 {
		return DefaultPartitions
	}
	return p.Partitions
}
