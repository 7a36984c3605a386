package opsview

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/flagdown/flagdown/shared/dispatch"
)

// DefaultInterval is how old a Hub's latest snapshot may be before the next reader builds a new
// one: the map's refresh period, seconds.
const DefaultInterval = time.Second

// DefaultKeep is how many recent snapshots a Hub keeps for BySeq.
const DefaultKeep = 64

// Frame is a built snapshot and its JSON encoding, shared by every viewer.
type Frame struct {
	Snapshot *Snapshot
	// JSON is Snapshot encoded once, without a trailing newline.
	JSON  []byte
	built time.Time
}

// Hub shares snapshots between the viewers of one process: whoever asks for the latest one after it
// is Interval old builds the next (one build at a time; the others wait for it and share it), so
// the stores see one snapshot's reads per Interval whatever the number of open maps. Seq grows by
// one per build. Safe for concurrent use.
type Hub struct {
	// Interval is the least time between two builds.
	Interval time.Duration
	// Keep is how many recent frames BySeq can return.
	Keep int
	// BuildTimeout bounds one build (the reads of both stores).
	BuildTimeout time.Duration

	build func(context.Context) (*Snapshot, error)

	mu     sync.Mutex
	seq    int64
	frames []*Frame // oldest first, at most Keep
}

// NewHub returns a Hub over build with DefaultInterval, DefaultKeep and a 5 s build timeout.
func NewHub(build func(context.Context) (*Snapshot, error)) *Hub {
	return &Hub{Interval: DefaultInterval, Keep: DefaultKeep, BuildTimeout: 5 * time.Second, build: build}
}

// Latest returns the latest frame, building a new one first when the latest is Interval old or
// there is none. A build is not cancelled by ctx (others may be waiting for it), only bounded by
// BuildTimeout.
func (h *Hub) Latest(ctx context.Context) (*Frame, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := len(h.frames); n > 0 && time.Since(h.frames[n-1].built) < h.Interval {
		return h.frames[n-1], nil
	}
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.BuildTimeout)
	defer cancel()
	s, err := h.build(bctx)
	if err != nil {
		return nil, err
	}
	h.seq++
	s.Seq = h.seq
	b, err := json.Marshal(s)
	if err != nil {
		return nil, dispatch.Internal(err)
	}
	f := &Frame{Snapshot: s, JSON: b, built: time.Now()}
	h.frames = append(h.frames, f)
	if len(h.frames) > max(h.Keep, 1) {
		h.frames = append(h.frames[:0], h.frames[len(h.frames)-max(h.Keep, 1):]...)
	}
	return f, nil
}

// BySeq returns the kept frame numbered seq, or false when it is not (yet, or any longer) kept.
func (h *Hub) BySeq(seq int64) (*Frame, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, f := range h.frames {
		if f.Snapshot.Seq == seq {
			return f, true
		}
	}
	return nil, false
}
