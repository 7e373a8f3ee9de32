package main

import (
	"bufio"
	"cmp"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// persistenceOps counts the Temporal dev server's persistence requests by
// operation (its Prometheus counters persistence_requests and
// visibility_persistence_requests): work per job that, unlike CPU time,
// does not grow when other programs share the cores.
type persistenceOps map[string]float64

// scrapeOps reads the counters from url (nil when url is empty or down).
func scrapeOps(url string) persistenceOps {
	if url == "" {
		return nil
	}
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	ops := persistenceOps{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		var kind string
		switch {
		case strings.HasPrefix(line, "persistence_requests{"):
			kind = ""
		case strings.HasPrefix(line, "visibility_persistence_requests{"):
			kind = "visibility "
		default:
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		ops[kind+label(line, "operation")] += v
	}
	return ops
}

// label is a Prometheus sample line's label value.
func label(line, name string) string {
	_, rest, ok := strings.Cut(line, name+`="`)
	if !ok {
		return "?"
	}
	v, _, _ := strings.Cut(rest, `"`)
	return v
}

// perJob is the requests per job since before, in total and by operation.
func (o persistenceOps) perJob(before persistenceOps, jobs int) (float64, persistenceOps) {
	if o == nil || before == nil {
		return 0, nil
	}
	total, by := 0.0, persistenceOps{}
	for k, v := range o {
		if d := (v - before[k]) / float64(jobs); d > 0 {
			by[k] = d
			total += d
		}
	}
	return total, by
}

// String lists the operations, most frequent first.
func (o persistenceOps) String() string {
	keys := largestFirst(o)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "  %6.2f  %s\n", o[k], k)
	}
	return b.String()
}

// largestFirst returns m's keys by value, largest first, ties by name.
func largestFirst(m map[string]float64) []string {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int {
		if c := cmp.Compare(m[b], m[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	return keys
}
