package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/kinflow/kinflow/internal/cacheadmin"
	"github.com/kinflow/kinflow/internal/embedding"
)

const cacheGCUsage = `usage: kinflow cache gc [--budget-gb N] [--min-age DURATION] [--dry-run] [--json]

Evicts the least recently used embedding artefacts (last planned use) until the
cache fits the budget: --budget-gb, else KINFLOW_CACHE_BUDGET_GB. Never a file
a running job's plan counts on or a stage has claimed, nor one planned within
--min-age (default 1h; 0 spares only the running jobs' files). Safe while jobs
run (docs/production.md, "Bounded storage").`

// runCacheGC is `kinflow cache gc` (docs/production.md, "Bounded storage").
func runCacheGC(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("cache gc", stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, cacheGCUsage) }
	budget := fs.Float64("budget-gb", -1, "budget in GB (10^9 bytes); default KINFLOW_CACHE_BUDGET_GB")
	minAge := fs.Duration("min-age", time.Hour, "spare files planned more recently than this")
	dry := fs.Bool("dry-run", false, "say what would be evicted, remove nothing")
	asJSON := fs.Bool("json", false, "the result as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	if *minAge < 0 {
		return usageError{"--min-age must not be negative"}
	}
	cfg, err := loadConfig()
	if err != nil {
		return err
	}
	bytes := cfg.CacheBudgetBytes
	if *budget >= 0 {
		bytes = int64(*budget * 1e9)
	}
	if bytes <= 0 {
		return usageError{"no budget: give --budget-gb N or set KINFLOW_CACHE_BUDGET_GB"}
	}
	layout, err := embedding.LayoutFromConfig(cfg)
	if err != nil {
		return err
	}
	st, err := openStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	res, err := cacheadmin.GC(ctx, layout, cacheadmin.GCOptions{Budget: bytes, MinAge: *minAge, DryRun: *dry,
		Protected: cacheadmin.RunningJobFiles(st, cfg.MediaRoot)})
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(res)
	}
	verb := "evicted"
	if *dry {
		verb = "would evict"
	}
	fmt.Fprintf(stdout, "cache: %d files, %d bytes (%d quarantined copies, %d bytes); budget %d bytes; %s %d files (%d bytes) and %d quarantined copies; spared %d in use or recent; %d put back (planned during the pass)\n",
		res.Files, res.Bytes, res.Quarantined, res.QuarantinedBytes, bytes, verb, res.Evicted, res.EvictedBytes, res.QuarantineExpired, res.Protected, res.Restored)
	return nil
}
