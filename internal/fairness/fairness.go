// Package fairness decides how a job shares the task queues with other
// keys' jobs: its class (interactive, normal, bulk), which Temporal serves
// in strict order, and its key's fairness key and weight, by which Temporal
// shares dispatch between keys of one class in weighted round robin.
//
// A job's workflow is started with a temporal.Priority made here; its
// activities and its child workflows (the GPU host's EmbedJob and their
// step activities, the tracker, the notice) inherit it, so every queue a
// job's work waits on is shared by key. The server must have fairness on
// (matching.enableFairness): docs/workflows.md, "Sharing the queues".
package fairness

import (
	"fmt"
	"strconv"
	"strings"

	"go.temporal.io/sdk/temporal"
)

// Class is a job's place in Temporal's strict priority order.
type Class string

const (
	// Interactive is a small job (at most KINFLOW_SMALL_JOB_ROWS rows): a
	// person waiting for a few rows is served before any backlog.
	Interactive Class = "interactive"
	// Normal is every other job, unless it is bulk.
	Normal Class = "normal"
	// Bulk is a job submitted as such (`priority: "bulk"`) or over
	// KINFLOW_BULK_JOB_ROWS rows: it is served when no normal or
	// interactive work waits.
	Bulk Class = "bulk"
)

// Requested values of the submit field `priority`.
const (
	// RequestAuto (the field absent, null or "auto") lets the job's size
	// decide.
	RequestAuto = "auto"
	// RequestBulk asks for bulk whatever the size.
	RequestBulk = "bulk"
)

// ParseRequest reads the submit field `priority`: "" or "auto" → auto,
// "bulk" → bulk (case and spaces ignored). A job can ask to wait behind
// others, never to be served ahead of them: there is no "high".
func ParseRequest(s string) (string, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", RequestAuto:
		return RequestAuto, nil
	case RequestBulk:
		return RequestBulk, nil
	}
	return "", fmt.Errorf("invalid priority %q: it must be 'auto' (the job's size decides) or 'bulk' (served after interactive and normal work)", s)
}

// ClassFor is the class of a job of rows rows: bulk when asked for or over
// bulkRows (0: no size makes a job bulk), interactive at most smallRows
// (0: none is), normal otherwise.
func ClassFor(rows int, request string, smallRows, bulkRows int) Class {
	switch {
	case request == RequestBulk:
		return Bulk
	case bulkRows > 0 && rows > bulkRows:
		return Bulk
	case smallRows > 0 && rows <= smallRows:
		return Interactive
	}
	return Normal
}

// PriorityKey is the class's Temporal priority key (1 is served first; 3
// is Temporal's default, which work started without one gets).
func (c Class) PriorityKey() int {
	switch c {
	case Interactive:
		return 2
	case Bulk:
		return 4
	}
	return 3
}

// Key is the fairness key of API key id: its database id, which is stable
// for the key's life and secret of nothing (never the key or its hash).
func Key(keyID int64) string { return "key-" + strconv.FormatInt(keyID, 10) }

// Weight bounds: Temporal clamps a weight to [0.001, 1000]; kinflow keeps an
// operator's choice within a range where a share still means something.
const (
	DefaultWeight = 1.0
	MinWeight     = 0.01
	MaxWeight     = 100.0
)

// ParseWeight reads an operator's weight: a number from MinWeight to
// MaxWeight.
func ParseWeight(s string) (float64, error) {
	w, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || !(w >= MinWeight && w <= MaxWeight) {
		return 0, fmt.Errorf("the weight is a number from %g to %g (1 is everyone's default; 2 is served about twice as often)", MinWeight, MaxWeight)
	}
	return w, nil
}

// Priority is what a job of class c of API key keyID (whose weight is
// weight; nil: the default) is started with.
func Priority(c Class, keyID int64, weight *float64) temporal.Priority {
	w := DefaultWeight
	if weight != nil {
		w = *weight
	}
	return temporal.Priority{PriorityKey: c.PriorityKey(), FairnessKey: Key(keyID), FairnessWeight: float32(w)}
}
