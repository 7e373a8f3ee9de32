package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/kinflow/kinflow/internal/embedding"
	"github.com/kinflow/kinflow/internal/methods"
)

// runPlan prints what a job of method M over the sequences of FILE would
// need from the embedding cache: totals and per-step counts, or the whole
// plan as JSON. Sequences are mapped without counting a use.
func runPlan(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("plan", stderr)
	method := fs.String("method", "", "method key (required), e.g. A-H")
	target := fs.String("target", "", "kcat, Km or kcat/Km (default: the method's first supported target)")
	asJSON := fs.Bool("json", false, "print the full plan as JSON")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: kinflow plan --method M [--target T] FILE [--json]")
		fs.PrintDefaults()
	}
	pos, err := parseWithPositionals(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || *method == "" {
		return usageError{"want --method M and exactly one FILE"}
	}
	cfg, err := loadConfig()
	if err != nil {
		return err
	}
	cat, err := methods.Load(cfg.MethodsFile)
	if err != nil {
		return err
	}
	d, ok := cat.Get(*method)
	if !ok {
		return usageError{fmt.Sprintf("unknown method %q (known: %s)", *method, strings.Join(cat.Keys(), ", "))}
	}
	tg := d.Supports[0]
	if *target != "" {
		t, ok := methods.ParseTarget(*target)
		if !ok || !d.Supported(t) {
			return usageError{fmt.Sprintf("method %s does not predict %q", d.Key, *target)}
		}
		tg = t
	}
	seqs, err := readSequenceFile(pos[0])
	if err != nil {
		return err
	}
	layout, err := embedding.LayoutFromConfig(cfg)
	if err != nil {
		return err
	}
	if d.Profile == methods.ProfileNone {
		if *asJSON {
			return json.NewEncoder(stdout).Encode(map[string]any{"method_key": d.Key, "target": tg, "profile": nil,
				"plan": nil, "reason": embedding.ErrNoCacheProfile.Error()})
		}
		fmt.Fprintf(stdout, "method %s uses no shared embedding cache: nothing to plan\n", d.Key)
		return nil
	}
	st, err := openStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	p, err := embedding.PlanSequences(ctx, layout, countlessMapper{st}, d, tg, seqs)
	if errors.Is(err, embedding.ErrNoCacheProfile) {
		return nil
	}
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetEscapeHTML(false)
		return enc.Encode(p)
	}
	fmt.Fprintf(stdout, "method %s, target %s, profile %s\n", p.MethodKey, p.Target, p.Profile)
	fmt.Fprintf(stdout, "sequences %d\nfiles total %d, cached %d, to compute %d\n", len(p.SeqIDs), p.Total, p.CachedAlready, p.NeedComputation)
	if p.Profile == methods.ProfileMethodAFull {
		fmt.Fprintf(stdout, "binding-site rows missing %d\n", p.MissingBindingSites)
	}
	for _, sp := range p.StepPlans {
		fmt.Fprintf(stdout, "step %s: %d sequences\n", sp.StepKey, len(sp.MissingSeqIDs))
	}
	return nil
}

// countlessMapper maps sequences for planning without counting a use.
type countlessMapper struct {
	st interface {
		AssignSeqIDs(ctx context.Context, seqs []string, countUse bool) ([]string, error)
	}
}

func (m countlessMapper) SeqIDs(ctx context.Context, seqs []string) ([]string, error) {
	return m.st.AssignSeqIDs(ctx, seqs, false)
}
