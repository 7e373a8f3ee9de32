package predcache

import "strings"

// transientMarks are texts of failures that a retry can cure: the machine
// ran out of memory, the process was killed, a call timed out, a resource
// was busy. A unit's failure reason holding one is never cached; only
// deterministic failures are (bad input, a model that returns no value).
var transientMarks = []string{
	"out of memory",
	"outofmemoryerror",
	"memoryerror",
	"cuda error",
	"cublas_status_alloc_failed",
	"killed",
	"sigkill",
	"signal 9",
	"timed out",
	"timeout",
	"deadline exceeded",
	"resource temporarily unavailable",
	"cannot allocate memory",
	"no space left on device",
	"connection refused",
	"connection reset",
	"broken pipe",
}

// Transient reports whether a unit's failure reason is a transient one
// (transientMarks, case-insensitive), which the prediction cache never
// stores.
func Transient(reason string) bool {
	r := strings.ToLower(reason)
	for _, m := range transientMarks {
		if strings.Contains(r, m) {
			return true
		}
	}
	return false
}
