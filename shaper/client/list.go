package client

import (
	"context"
	"iter"
	"net/http"
	"time"
)

// The listings page: each answer holds at most a page of items (Limit, by
// default 100, at most 1000) and the cursor of the next page, Next, empty
// on the last page. Pass Next back as After to go on; the All… methods
// follow the pages for you.

// DeadPage is a page of dead letters, the answer to GET /v1/dead.
type DeadPage struct {
	Dead []DeadLetter `json:"dead"`
	// Next is the cursor of the next page (DeadFilter.After); "" on the
	// last page.
	Next string `json:"next,omitempty"`
}

// DeadLetterPage lists a page of the dead letters f selects (f.Limit from
// f.After on), without their payloads, and where the next page starts. A
// page with a Reason filter may hold fewer than f.Limit (even none) and
// still have a Next. Errors are DeadLetters'.
func (c *Client) DeadLetterPage(ctx context.Context, f DeadFilter) (DeadPage, error) {
	var p DeadPage
	err := c.call(ctx, http.MethodGet, "/v1/dead"+f.query(), nil, &p, f.Policy != "")
	return p, err
}

// AllDeadLetters lists every dead letter f selects from f.After on, page
// after page (f.Limit a page), without their payloads. It stops at the
// first error, which it yields.
func (c *Client) AllDeadLetters(ctx context.Context, f DeadFilter) iter.Seq2[DeadLetter, error] {
	return pages(func(after string) ([]DeadLetter, string, error) {
		f.After = after
		p, err := c.DeadLetterPage(ctx, f)
		return p.Dead, p.Next, err
	}, f.After)
}

// DeferredJob is a job deferred behind its key's full queue, waiting to be
// re-admitted, as GET /v1/deferred lists it.
type DeferredJob struct {
	// Seq is the job's place in its policy's deferred stream.
	Seq    uint64 `json:"seq"`
	Policy string `json:"policy"`
	Key    string `json:"key"`
	ID     string `json:"id"`
	// DeferredAt is when the job was deferred.
	DeferredAt time.Time `json:"deferred_at"`
	// Deferrals (failed re-admissions), NextTry and LastError are what the
	// job's record says (Job), when it has one; Reason, as Job's, says why
	// a job past its NextTry is still deferred.
	Deferrals int       `json:"deferrals"`
	NextTry   time.Time `json:"next_try,omitzero"`
	Reason    string    `json:"reason,omitempty"`
	LastError string    `json:"last_error,omitempty"`
	// Size is the payload's size in bytes.
	Size int `json:"size"`
}

// DeferredFilter selects deferred jobs; its zero value selects the first
// page of every policy's.
type DeferredFilter struct {
	// Policy and Key select when set.
	Policy string
	Key    string
	// Limit bounds a page (at most 1000); 0 means the shaper's default,
	// 100.
	Limit int
	// After is the Next of the page before; "" for the first page.
	After string
}

// DeferredPage is a page of deferred jobs, the answer to GET
// /v1/deferred.
type DeferredPage struct {
	Deferred []DeferredJob `json:"deferred"`
	// Next is the cursor of the next page (DeferredFilter.After); "" on
	// the last page.
	Next string `json:"next,omitempty"`
}

// DeferredJobs lists a page of the deferred jobs f selects (f.Limit from
// f.After on), in order of policy and of deferral, and where the next page
// starts. A filter naming an unknown policy is ErrUnknownPolicy; a bad
// key, limit or cursor ErrBadRequest.
func (c *Client) DeferredJobs(ctx context.Context, f DeferredFilter) (DeferredPage, error) {
	var p DeferredPage
	err := c.call(ctx, http.MethodGet, "/v1/deferred"+query(f.Limit, "policy", f.Policy, "key", f.Key, "after", f.After), nil, &p, f.Policy != "")
	return p, err
}

// AllDeferredJobs lists every deferred job f selects from f.After on,
// page after page (f.Limit a page). It stops at the first error, which it
// yields.
func (c *Client) AllDeferredJobs(ctx context.Context, f DeferredFilter) iter.Seq2[DeferredJob, error] {
	return pages(func(after string) ([]DeferredJob, string, error) {
		f.After = after
		p, err := c.DeferredJobs(ctx, f)
		return p.Deferred, p.Next, err
	}, f.After)
}

// pages yields the items of the pages page reads, from after on, until a
// page without a next or an error.
func pages[T any](page func(after string) ([]T, string, error), after string) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		for {
			items, next, err := page(after)
			if err != nil {
				var zero T
				yield(zero, err)
				return
			}
			for _, it := range items {
				if !yield(it, nil) {
					return
				}
			}
			if next == "" {
				return
			}
			after = next
		}
	}
}
