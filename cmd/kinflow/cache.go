package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/kinflow/kinflow/internal/cacheadmin"
	"github.com/kinflow/kinflow/internal/embedding"
	"github.com/kinflow/kinflow/internal/embedjob"
	"github.com/kinflow/kinflow/internal/predcache"
)

const cacheUsage = `usage: kinflow cache status [--json]
       kinflow cache verify --family F [--sample N] [--seed S]
       kinflow cache adopt --family F [--sample N] [--seed S]
       kinflow cache repair --family F
       kinflow cache purge --family F [--synthetic]
       kinflow cache gc [--budget-gb N] [--min-age D] [--dry-run] [--json]
       kinflow cache predictions status [--method M]
       kinflow cache predictions purge --method M [--version V]

On the configured media root (KINFLOW_MEDIA_ROOT). status counts per family
the files, those without an integrity record (unhashed: never used until
adopted), those whose stat differs from it (mismatched), those whose record
an older kinflow wrote without the inode fields (old-format: not damage;
hashed and recorded anew at their next use, or by verify) and those set
aside (quarantined). verify hashes every file against its record (setting bad ones
aside, as a job's plan does), fails on files without a record, and recomputes
a sample; adopt does the same and, when the sample passes, records the
fingerprint and every file without a record; repair does the same check and recomputes every
file set aside. verify, adopt and repair compute with the configured step executor (KINFLOW_STEP_EXECUTOR and the GPU
host's env file, KINFLOW_GPU_ENV_FILE) and read sequences from the seq map
(KINFLOW_DATABASE_URL). cache predictions is the prediction cache in the
database (KINFLOW_DATABASE_URL): how many units it holds, and removing a
method's units (of one model_version, or all).`

// runCache is `kinflow cache …`: the operator's view of the embedding cache
// and its provenance (internal/cacheadmin). Each subcommand prints what it
// did; a verify or adopt that finds a file off its bound exits 1.
func runCache(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintln(stdout, cacheUsage)
		return nil
	}
	sub := args[0]
	if sub == "predictions" {
		return runCachePredictions(ctx, args[1:], stdout, stderr)
	}
	if sub == "gc" { // cachegc.go: evict cache artefacts down to the budget
		return runCacheGC(ctx, args[1:], stdout, stderr)
	}
	fs := newFlags("cache "+sub, stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, cacheUsage) }
	family := fs.String("family", "", "artefact family, e.g. esm2_layer_26/mean_vecs (see cache status)")
	sample := fs.Int("sample", cacheadmin.DefaultSample, "files to recompute (verify, adopt)")
	seed := fs.Uint64("seed", 0, "seed of the sample (0: random)")
	synthetic := fs.Bool("synthetic", false, "purge only the synthetic files")
	asJSON := fs.Bool("json", false, "status as JSON")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	cfg, err := loadConfig()
	if err != nil {
		return err
	}
	layout, err := embedding.LayoutFromConfig(cfg)
	if err != nil {
		return err
	}
	if sub != "status" && *family == "" {
		return usageError{"want --family F"}
	}
	switch sub {
	case "status":
		return cacheStatus(layout, *asJSON, stdout)
	case "purge":
		return cachePurge(layout, *family, *synthetic, stdout)
	case "verify", "adopt", "repair":
		st, err := embedjob.SettingsFromConfig(cfg)
		if err != nil {
			return err
		}
		db, err := openStore(ctx, cfg)
		if err != nil {
			return err
		}
		defer db.Close()
		v := &cacheadmin.Verifier{Layout: layout, Settings: st, Executor: cfg.StepExecutor, Sequences: db.SequencesByID, Seed: *seed,
			Log: func(format string, args ...any) { fmt.Fprintf(stdout, format+"\n", args...) }}
		if sub == "repair" {
			return cacheRepair(ctx, v, *family, stdout)
		}
		return cacheVerify(ctx, v, sub, *family, *sample, stdout)
	}
	return usageError{fmt.Sprintf("unknown cache command %q (status, verify, adopt, repair or purge)", sub)}
}

// cacheStatus prints each family's status (a table, or JSON).
func cacheStatus(layout *embedding.Layout, asJSON bool, stdout io.Writer) error {
	st, err := cacheadmin.Status(layout)
	if err != nil {
		return err
	}
	if asJSON {
		if st == nil {
			st = []cacheadmin.FamilyStatus{}
		}
		if err := json.NewEncoder(stdout).Encode(st); err != nil {
			return err
		}
		return forgedError(st)
	}
	if len(st) == 0 {
		fmt.Fprintf(stdout, "no cached artefacts under %s\n", layout.SequenceInfo())
		return nil
	}
	if err := printCacheStatus(st, stdout); err != nil {
		return err
	}
	return forgedError(st)
}

// forgedError is the error `cache status` ends with when a family holds
// forged records (their files are not trusted and are set aside at their
// next use), nil otherwise.
func forgedError(st []cacheadmin.FamilyStatus) error {
	n := 0
	for _, s := range st {
		n += s.Forged
	}
	if n == 0 {
		return nil
	}
	return fmt.Errorf("%d file(s) have a forged integrity record (its authentication code does not match: the manifest was rewritten without the record key); they are not trusted and are set aside at their next use, or now by `kinflow cache verify`", n)
}

// printCacheStatus prints the status table, then a line per family that
// holds old-format records.
func printCacheStatus(st []cacheadmin.FamilyStatus, stdout io.Writer) error {
	w := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "FAMILY\tFILES\tBYTES\tORIGIN\tSYNTHETIC\tUNVERIFIED\tUNHASHED\tMISMATCHED\tFORGED\tOLD-FORMAT\tQUARANTINED\tFINGERPRINT\tMODEL")
	for _, s := range st {
		fp := s.Fingerprint
		if fp == "" {
			fp = "(none recorded)"
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", s.Family, s.Files, s.Bytes, s.Origin(), s.Synthetic, s.Unverified,
			s.Unhashed, s.Mismatched, s.Forged, s.OldFormat, s.Quarantined, fp, s.Model)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	// Old-format records are what an upgrade leaves, not damage: say so,
	// and how to bring them up to date, rather than let them read as
	// mismatches.
	for _, s := range st {
		if s.OldFormat == 0 {
			continue
		}
		now := ""
		if s.Synthetic < s.Files { // verify wants a real file to recompute
			now = fmt.Sprintf(", or all now with `kinflow cache verify --family %s`", s.Family)
		}
		fmt.Fprintf(stdout, "%s: %d file(s) with an old-format integrity record (written by an older kinflow, without the inode fields): not damage; "+
			"each is hashed once at its next use and recorded anew%s\n", s.Family, s.OldFormat, now)
	}
	return nil
}

// cachePurge removes a family's files (or only its synthetic ones).
func cachePurge(layout *embedding.Layout, family string, synthetic bool, stdout io.Writer) error {
	res, err := cacheadmin.Purge(layout, family, synthetic)
	if err != nil {
		return err
	}
	what := "files"
	if synthetic {
		what = "synthetic files"
	}
	fmt.Fprintf(stdout, "purged %d %s (%d bytes) from %s", res.Removed, what, res.Bytes, family)
	if res.RecordRemoved {
		fmt.Fprint(stdout, "; its fingerprint record removed")
	}
	fmt.Fprintln(stdout)
	return nil
}

// cacheRepair hashes a family's files and recomputes those set aside.
func cacheRepair(ctx context.Context, v *cacheadmin.Verifier, family string, stdout io.Writer) error {
	res, err := v.Repair(ctx, family)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: %d file(s) hashed, %d set aside now; %d recomputed with step %s", family,
		res.Integrity.Hashed, len(res.Integrity.Bad), res.Recomputed, res.Step)
	if res.NoSequence > 0 {
		fmt.Fprintf(stdout, "; %d without a sequence in the seq map", res.NoSequence)
	}
	fmt.Fprintln(stdout)
	if len(res.Failures) > 0 {
		return fmt.Errorf("repair incomplete: the step program did not write %d file(s)", len(res.Failures))
	}
	return nil
}

// cacheVerify is `cache verify` and `cache adopt`: hash every file against
// its record and recompute a sample; adopt records the files without one.
func cacheVerify(ctx context.Context, v *cacheadmin.Verifier, sub, family string, sample int, stdout io.Writer) error {
	var res cacheadmin.VerifyResult
	var err error
	if sub == "verify" {
		res, err = v.Verify(ctx, family, sample)
	} else {
		res, err = v.Adopt(ctx, family, sample)
	}
	if res.NoSequence > 0 {
		fmt.Fprintf(stdout, "%d sampled file(s) skipped: their sequence is not in the seq map\n", res.NoSequence)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: %d file(s) hashed against their records, %d set aside\n", family, res.Integrity.Hashed, len(res.Integrity.Bad))
	fmt.Fprintf(stdout, "%s: %d of %d recomputed file(s) within the bound (step %s, configured fingerprint %s)\n",
		family, res.Checked-res.Failed, res.Checked, res.Step, res.Fingerprint.ID())
	if res.Failed > 0 {
		return errors.New("verify failed: the cache holds files the configured step program does not reproduce")
	}
	if n := len(res.Integrity.Bad); n > 0 {
		forged := 0
		for _, b := range res.Integrity.Bad {
			if b.Reason == embedding.ForgedReason {
				forged++
			}
		}
		if forged > 0 {
			fmt.Fprintf(stdout, "%s: %d file(s) with a forged integrity record (its authentication code does not match), set aside\n", family, forged)
		}
		return fmt.Errorf("verify failed: %d file(s) differed from their records and were set aside; `kinflow cache repair --family %s` recomputes them", n, family)
	}
	if n := len(res.Integrity.Unrecorded); n > 0 {
		fmt.Fprintf(stdout, "%s: %d file(s) without an integrity record (unverified)\n", family, n)
		return fmt.Errorf("verify failed: %d file(s) have no integrity record (a damaged manifest or a foreign writer) and are not used: jobs set them aside and compute them again; `kinflow cache adopt --family %s` checks a sample and records them", n, family)
	}
	if sub == "adopt" {
		fmt.Fprintf(stdout, "adopted %s under fingerprint %s (%d file(s) without a record checked and recorded)\n", family, res.Fingerprint.ID(), res.Adopted)
	}
	return nil
}

// runCachePredictions is `kinflow cache predictions status|purge`.
func runCachePredictions(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "status" && args[0] != "purge") {
		fmt.Fprintln(stderr, cacheUsage)
		return usageError{"want cache predictions status or cache predictions purge"}
	}
	sub := args[0]
	fs := newFlags("cache predictions "+sub, stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, cacheUsage) }
	method := fs.String("method", "", "method key, e.g. B or A-H")
	version := fs.String("version", "", "purge: only this model_version (default: every version)")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	if sub == "purge" && *method == "" {
		return usageError{"want --method M"}
	}
	st, err := storeFromEnv(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	pc := predcache.New(st)
	if sub == "status" {
		n, err := pc.Count(ctx, *method)
		if err != nil {
			return err
		}
		what := "every method"
		if *method != "" {
			what = "method " + *method
		}
		fmt.Fprintf(stdout, "%d cached prediction units for %s\n", n, what)
		return nil
	}
	n, err := pc.Purge(ctx, *method, *version)
	if err != nil {
		return err
	}
	what := "every model_version"
	if *version != "" {
		what = "model_version " + *version
	}
	fmt.Fprintf(stdout, "removed %d cached prediction units of method %s (%s)\n", n, *method, what)
	return nil
}
