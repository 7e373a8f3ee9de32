package embedjob

import (
	"maps"
	"slices"
	"sync"
)

// Registry is the set of GPU job ids this host knows of: submitted over its
// HTTP API or run by its step activities. /health counts their states; a job
// leaves the set once its workflow has closed.
type Registry struct {
	mu  sync.Mutex
	ids map[string]struct{}
}

// NewRegistry makes an empty Registry.
func NewRegistry() *Registry { return &Registry{ids: map[string]struct{}{}} }

// Add records id.
func (r *Registry) Add(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ids[id] = struct{}{}
}

// Remove forgets id.
func (r *Registry) Remove(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.ids, id)
}

// List returns the ids, sorted.
func (r *Registry) List() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(maps.Keys(r.ids))
}
