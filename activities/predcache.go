package activities

import (
	"context"
	"encoding/json"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/kinflow/kinflow/internal/jobfiles"
	"github.com/kinflow/kinflow/internal/methods"
	"github.com/kinflow/kinflow/internal/predcache"
	"github.com/kinflow/kinflow/internal/provenance"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/units"
)

// stagePredCache is one stage's use of the prediction cache: the key of
// each unit sent (same order as send) and the entries found.
type stagePredCache struct {
	keys []predcache.Key
	// keyOf is the key of each unit sent, by unit index.
	keyOf map[int]predcache.Key
	hits  map[predcache.Key]predcache.Entry
	// version is the method's model version the entries are stored under.
	version string
}

// stageCache looks up the stage's units in the prediction cache. It returns
// nil, and the stage neither reads nor writes the cache, when no cache is
// wired or the keys could not name everything the values depend on: a
// family of unknown origin has no fingerprint, and a real engine that read
// synthetic files of a family recorded as real (a mixed family) made
// numbers its family fingerprint does not describe. With the job's
// usePredictionCache false nothing is looked up, and what the engine
// computes is still stored. A lookup that fails is logged and the stage
// predicts every unit: the cache only ever saves work. For a method that
// gives uncertainty, an entry with a value stored without the method's
// uncertainty (before the cache kept uncertainties) is a miss: the unit is
// computed again, and its new entry replaces the old one.
func (a *Activities) stageCache(ctx context.Context, job *store.Job, d *methods.Descriptor, sr jobfiles.StageRows, prov provenance.Stage, send []int, log *slog.Logger) *stagePredCache {
	if a.PredCache == nil || len(prov.Unverified) > 0 {
		return nil
	}
	if prov.SyntheticArtefacts && a.Config.PredictionEngine != "synthetic" {
		for _, id := range prov.Families {
			if !strings.HasPrefix(id, "synthetic-") {
				return nil
			}
		}
	}
	keyer := predcache.NewKeyer(predcache.Stage{
		Target: sr.Target, Method: d.Key, ModelVersion: prov.ModelVersion,
		EngineFingerprint: prov.EngineFingerprint, Families: prov.Families,
		FixedArgs: fixedArgs(d, methods.Target(sr.Target), a.Config.MethodECheckpointRoot), Canonicalize: job.CanonicalizeSubstrates,
	})
	pc := &stagePredCache{keys: make([]predcache.Key, len(send)), keyOf: make(map[int]predcache.Key, len(send)), version: prov.ModelVersion}
	for k, i := range send {
		u := sr.Units[i]
		pc.keys[k] = keyer.Key(predcache.Unit{Seq: u.Seq, Substrates: u.Substrates, Products: u.Products, Kwargs: u.Kwargs})
		pc.keyOf[i] = pc.keys[k]
	}
	if !job.UsePredictionCache {
		// Predicted afresh, and still stored for later jobs.
		pc.hits = map[predcache.Key]predcache.Entry{}
		return pc
	}
	start := time.Now()
	hits, err := a.PredCache.Lookup(ctx, pc.keys)
	if err != nil {
		log.Warn("prediction cache lookup failed; predicting every unit", "error", err)
		hits = map[predcache.Key]predcache.Entry{}
	}
	stale := 0
	if d.Uncertainty {
		for k, e := range hits {
			if e.Value != nil && !e.UncertaintyRecorded {
				delete(hits, k)
				stale++
			}
		}
	}
	pc.hits = hits
	log.Info("prediction cache", "units", len(send), "cached", len(hits), "without_uncertainty", stale, "lookup_ms", time.Since(start).Milliseconds())
	return pc
}

// storeComputed writes the units the engine just computed (indices
// computed into results) back to the cache: a value (with its uncertainty,
// for a method that gives one) or the engine's per-unit failure reason,
// unless that reason is transient (out of
// memory, killed, timed out: predcache.Transient), which the next job must
// try again. A failed write is logged; the stage's results stand.
func (a *Activities) storeComputed(ctx context.Context, pc *stagePredCache, d *methods.Descriptor, results []units.Result, computed []int, log *slog.Logger) {
	if len(computed) == 0 {
		return
	}
	puts := make([]predcache.Put, 0, len(computed))
	for _, i := range computed {
		r := results[i]
		key, ok := pc.keyOf[i]
		if !ok || (r.Value == nil && predcache.Transient(r.Error)) {
			continue
		}
		p := predcache.Put{Key: key, Value: r.Value, Error: r.Error, UncertaintyRecorded: d.Uncertainty}
		if d.Uncertainty && r.Value != nil {
			p.Uncertainty = r.Uncertainty
		}
		puts = append(puts, p)
	}
	if err := a.PredCache.Store(context.WithoutCancel(ctx), d.Key, pc.version, puts, time.Now()); err != nil {
		log.Warn("prediction cache write failed", "error", err)
	}
}

// fixedArgs is the method's fixed arguments for target t in a stable text
// form: its command (program, arguments, working folder) and file contract
// and the input behaviour of t. The engine's fingerprint covers the
// program's and model's files; these cover how it is called. A method whose
// environment names the configured checkpoint root (method E's
// METHODE_CHECKPOINT_ROOT: its model weights) has that root in its key too,
// since neither its command nor its fingerprint names it.
func fixedArgs(d *methods.Descriptor, t methods.Target, checkpointRoot string) string {
	root := ""
	for _, e := range d.EnvPaths {
		if strings.Contains(e.Value, "{methode_checkpoint_root}") {
			root = checkpointRoot
		}
	}
	b, _ := json.Marshal(struct {
		Command        *methods.Command
		Contract       methods.FileContract
		Behavior       string
		CheckpointRoot string `json:",omitempty"`
	}{d.Command, d.FileContract, d.InputBehavior(t), root})
	return string(b)
}

// withCacheUse adds the stage's use of the prediction cache to its
// provenance (the JSON result's provenance): the number of units served
// from the cache and which rows they belong to.
func withCacheUse(prov provenance.Stage, sr jobfiles.StageRows, results []units.Result) provenance.Stage {
	byRow := map[int]*provenance.CachedRow{}
	first := map[int]time.Time{}
	n := 0
	for i, r := range results {
		if r.Cached == nil {
			continue
		}
		n++
		row := sr.Units[i].Row
		c := byRow[row]
		if c == nil {
			c = &provenance.CachedRow{Row: row}
			byRow[row] = c
			first[row] = *r.Cached
		}
		c.Units++
		if r.Cached.Before(first[row]) {
			first[row] = *r.Cached
		}
	}
	prov.PredictionsCached = n
	prov.CachedRows = make([]provenance.CachedRow, 0, len(byRow))
	for row, c := range byRow {
		prov.CachedRows = append(prov.CachedRows, provenance.CachedRow{Row: row, Units: c.Units, FirstComputedAt: first[row].UTC().Format(time.RFC3339Nano)})
	}
	sort.Slice(prov.CachedRows, func(i, j int) bool { return prov.CachedRows[i].Row < prov.CachedRows[j].Row })
	return prov
}
