package limiter

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// memShards is the number of independently locked parts of a Memory limiter.
const memShards = 64

// Memory is an in-process Limiter: one state per key, kept in a sharded map
// and dropped once it is equivalent to no state at all (the key is back to
// its full quota). It limits the events of one process only; use Redis to
// share limits between processes.
//
// A Memory is safe for concurrent use. Create it with NewMemory.
type Memory struct {
	alg   Algorithm
	limit Limit
	store memStore
}

// memStore is the per-algorithm state map, typed by its state.
type memStore interface {
	allow(key string, now time.Time) Result
	len() int
}

// NewMemory returns an in-memory limiter applying l with alg. Allow takes
// its time from time.Now; AllowAt lets the caller pass it.
func NewMemory(alg Algorithm, l Limit) (*Memory, error) {
	if err := l.Validate(); err != nil {
		return nil, fmt.Errorf("new memory limiter: %w", err)
	}
	m := &Memory{alg: alg, limit: l}
	switch alg {
	case GCRA:
		m.store = newShardedStore[GCRAState](l)
	case TokenBucket:
		m.store = newShardedStore[TokenBucketState](l)
	case FixedWindow:
		m.store = newShardedStore[FixedWindowState](l)
	case SlidingLog:
		m.store = newShardedStore[SlidingLogState](l)
	case SlidingWindow:
		m.store = newShardedStore[SlidingWindowState](l)
	default:
		return nil, fmt.Errorf("new memory limiter: %q: %w", alg, ErrUnknownAlgorithm)
	}
	return m, nil
}

// Allow decides for one event of key now. It never returns an error.
func (m *Memory) Allow(_ context.Context, key string) (Result, error) {
	return m.store.allow(key, time.Now()), nil
}

// AllowAt decides for one event of key at now. A time earlier than one
// already passed for the key is a clock stepping back: it is decided
// against the key's state as it is, and never admits more than the later
// time would.
func (m *Memory) AllowAt(key string, now time.Time) Result {
	return m.store.allow(key, now)
}

// Len returns the number of keys with state. Idle keys are dropped lazily,
// so it may count keys that are already back to their full quota.
func (m *Memory) Len() int { return m.store.len() }

// Algorithm returns the algorithm m applies.
func (m *Memory) Algorithm() Algorithm { return m.alg }

// Limit returns the limit m applies.
func (m *Memory) Limit() Limit { return m.limit }

// statePtr is the constraint the five state types meet through their pointers.
type statePtr[S any] interface {
	*S
	Allow(l Limit, now time.Time) Result
}

type memEntry[S any] struct {
	state   S
	expires time.Time // when state becomes equivalent to no state
}

type memShard[S any] struct {
	mu        sync.Mutex
	m         map[string]*memEntry[S]
	nextSweep time.Time
}

type shardedStore[S any, P statePtr[S]] struct {
	limit  Limit
	sweep  time.Duration
	shards [memShards]memShard[S]
}

func newShardedStore[S any, P statePtr[S]](l Limit) *shardedStore[S, P] {
	s := &shardedStore[S, P]{limit: l, sweep: min(max(l.Period, time.Second), time.Minute)}
	for i := range s.shards {
		s.shards[i].m = make(map[string]*memEntry[S])
	}
	return s
}

func (s *shardedStore[S, P]) allow(key string, now time.Time) Result {
	sh := &s.shards[fnv32(key)%memShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if now.After(sh.nextSweep) {
		for k, e := range sh.m {
			if !e.expires.After(now) {
				delete(sh.m, k)
			}
		}
		sh.nextSweep = now.Add(s.sweep)
	}
	e := sh.m[key]
	if e == nil {
		e = new(memEntry[S])
		sh.m[key] = e
	}
	r := P(&e.state).Allow(s.limit, now)
	if exp := now.Add(r.Reset); exp.After(e.expires) {
		e.expires = exp
	}
	return r
}

func (s *shardedStore[S, P]) len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// fnv32 is FNV-1a over key, without allocating.
func fnv32(key string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return h
}
