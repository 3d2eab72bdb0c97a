package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// heap is a heap profile of the shaper after a GC, as net/http/pprof
// serves it in text (/debug/pprof/heap?gc=1&debug=1): the live heap,
// split between the embedded nats-server and the rest, and the rest by
// site.
type heap struct {
	alloc  float64            // runtime.MemStats.HeapAlloc: every live byte
	server float64            // sampled live bytes allocated under nats-server's frames
	own    float64            // the others: the shaper, its NATS client, the runtime
	sites  map[string]float64 // own, by the innermost frame of the module (else the innermost)
}

// serverPkg marks a frame of the embedded nats-server.
const serverPkg = "github.com/nats-io/nats-server/"

// modulePkg marks a frame of the shaper's own code.
const modulePkg = "github.com/shaper-dev/shaper/"

// parseHeap reads a text heap profile. Its samples are scaled as pprof
// scales them (each record stands for 1/(1−e^(−size/rate)) of what it
// counts), so that they estimate every live byte.
func parseHeap(r io.Reader) (heap, error) {
	h := heap{sites: map[string]float64{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	rate := 0.0
	var bytes float64 // the current record's, scaled
	var frames []string
	flush := func() {
		if bytes == 0 {
			frames = frames[:0]
			return
		}
		site, server := "", false
		for _, f := range frames {
			if strings.HasPrefix(f, serverPkg) {
				server = true
			}
			if site == "" && strings.HasPrefix(f, modulePkg) {
				site = f
			}
		}
		switch {
		case server:
			h.server += bytes
		default:
			if site == "" && len(frames) > 0 {
				site = frames[0]
			}
			h.own += bytes
			h.sites[site] += bytes
		}
		bytes, frames = 0, frames[:0]
	}
	for sc.Scan() {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "heap profile:"):
			_, r, ok := strings.Cut(l, "@ heap/")
			v, err := strconv.ParseFloat(strings.TrimSpace(r), 64)
			if !ok || err != nil || v <= 0 {
				return h, fmt.Errorf("heap profile: no sampling rate in %q", l)
			}
			rate = v / 2
		case strings.HasPrefix(l, "#\t0x"):
			if f := strings.Fields(l); len(f) >= 3 {
				name := f[2]
				if i := strings.LastIndex(name, "+0x"); i > 0 {
					name = name[:i]
				}
				frames = append(frames, name)
			}
		case strings.HasPrefix(l, "# HeapAlloc = "):
			flush()
			v, err := strconv.ParseFloat(strings.TrimPrefix(l, "# HeapAlloc = "), 64)
			if err != nil {
				return h, fmt.Errorf("heap profile: %q: %w", l, err)
			}
			h.alloc = v
		case len(l) > 0 && l[0] >= '0' && l[0] <= '9' && strings.Contains(l, " @ "):
			flush()
			var objs, size, aobjs, asize int64
			if _, err := fmt.Sscanf(l, "%d: %d [%d: %d]", &objs, &size, &aobjs, &asize); err != nil {
				return h, fmt.Errorf("heap profile: record %q: %w", l, err)
			}
			if objs > 0 && size > 0 && rate > 0 {
				avg := float64(size) / float64(objs)
				bytes = float64(size) / (1 - math.Exp(-avg/rate))
			}
		}
	}
	flush()
	if err := sc.Err(); err != nil {
		return h, err
	}
	if rate == 0 || h.alloc == 0 {
		return h, fmt.Errorf("heap profile: no header or no HeapAlloc")
	}
	return h, nil
}
