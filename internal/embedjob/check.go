package embedjob

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/embedding"
)

// checkSequence is the sequence `kinflow gpu-worker --check` embeds: the
// first 60 residues of E. coli's tryptophan synthase alpha (P0A877), every
// residue a standard one.
const checkSequence = "MERYENLFAQLNDRREGAFVPFVTLGDPGIEQSLKIIDTLIDAGADALELGVPFSDPLAD"

// CheckResult is one step's outcome of Check.
type CheckResult struct {
	Step string
	// Program is "server", "command" or "synthetic".
	Program string
	OK      bool
	Took    time.Duration
	Detail  string
}

// Check runs every configured step once on one short sequence, as `kinflow
// gpu-worker --check` does before a host takes work: each step's program
// starts (a resident server loads its model and says ready), embeds the
// sequence into a scratch media root (the shared cache is never touched) and
// every file it owes is checked like a real batch's. Steps without a program
// are skipped unless the executor is synthetic. It writes one line per step
// to out and returns the results.
func Check(ctx context.Context, cfg *config.Config, st *Settings, log *slog.Logger, out io.Writer) ([]CheckResult, error) {
	scratch, err := os.MkdirTemp("", "kinflow-check-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(scratch)
	c := *cfg
	c.MediaRoot = scratch
	c.MethodJCacheDir = ""
	acts, err := NewActivities(&c, st, nil, log)
	if err != nil {
		return nil, err
	}
	defer acts.Close()
	acts.Engine.Leases = nil
	var res []CheckResult
	for _, step := range ActiveSteps {
		kind := "synthetic"
		if cfg.StepExecutor == "command" {
			_, srv := st.Servers[step]
			_, cmd := st.Commands[step]
			switch {
			case srv:
				kind = "server"
			case cmd:
				kind = "command"
			default:
				fmt.Fprintf(out, "%-26s -     no program configured\n", step)
				continue
			}
		}
		r := CheckResult{Step: step, Program: kind}
		// Steps share files (prot_t5_mean's vector is one of
		// methoda_t5_full's): each starts from an empty cache, so that every
		// program really runs.
		if err := os.RemoveAll(filepath.Join(scratch, embedding.SequenceInfoDir)); err != nil {
			return res, err
		}
		start := time.Now()
		paths, err := acts.Layout.ExpectedPaths(step, "kinflowcheck")
		if err == nil {
			var o StepOutcome
			o, err = acts.Engine.RunStep(ctx, StepRequest{JobID: "check", StepKey: step,
				Seqs: []SeqItem{{SeqID: "kinflowcheck", Sequence: checkSequence, Outputs: paths}}})
			switch {
			case err != nil:
			case o.Failure != nil:
				err = o.Failure
			case len(o.Missing) > 0:
				err = fmt.Errorf("%d of %d files missing: %s", len(o.Missing), len(paths), o.Missing[0].Reason)
			}
		}
		r.Took = time.Since(start)
		r.OK = err == nil
		if err != nil {
			r.Detail = strings.ReplaceAll(err.Error(), scratch, "MEDIA")
		} else {
			r.Detail = fmt.Sprintf("%d file(s) well-formed", len(paths))
			for _, s := range acts.Servers.Status() {
				if s.Key == step && len(s.Ready) > 0 {
					r.Detail += fmt.Sprintf("; ready %v", s.Ready)
				}
			}
		}
		mark := "ok  "
		if !r.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(out, "%-26s %s  %-9s %6.2fs  %s\n", step, mark, kind, r.Took.Seconds(), r.Detail)
		res = append(res, r)
	}
	return res, nil
}
