package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"unicode/utf8"

	"github.com/kinflow/kinflow/internal/embedding"
	"github.com/kinflow/kinflow/internal/methods"
)

// runSeqID prints `seq_id<TAB>length` for every sequence of a FASTA or CSV
// file, assigning ids to new sequences (get-or-create: a known sequence
// keeps its id; docs/embedding.md, "Sequence ids").
func runSeqID(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("seqid", stderr)
	method := fs.String("method", "", "normalise as for this method's planner (trim, drop empty, de-duplicate; method D also upper-cases and cuts to 1022); default: trim only, one line per input sequence")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: kinflow seqid [--method M] FILE   (FASTA, or CSV with a `Protein Sequence` column)")
		fs.PrintDefaults()
	}
	arg, err := oneArg(fs, args, "FILE")
	if err != nil {
		return err
	}
	seqs, err := readSequenceFile(arg)
	if err != nil {
		return err
	}
	cfg, err := loadConfig()
	if err != nil {
		return err
	}
	if *method != "" {
		cat, err := methods.Load(cfg.MethodsFile)
		if err != nil {
			return err
		}
		d, ok := cat.Get(*method)
		if !ok {
			return usageError{fmt.Sprintf("unknown method %q", *method)}
		}
		seqs = embedding.NormaliseSequences(d.Profile, seqs)
	} else {
		// Trim only, keeping duplicates and order: one line per input sequence.
		var kept []string
		for _, s := range seqs {
			if n := embedding.NormaliseSequences("", []string{s}); len(n) == 1 {
				kept = append(kept, n[0])
			}
		}
		seqs = kept
	}
	st, err := openStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	ids, err := st.SeqIDs(ctx, seqs)
	if err != nil {
		return err
	}
	for i, id := range ids {
		fmt.Fprintf(stdout, "%s\t%d\n", id, utf8.RuneCountInString(seqs[i]))
	}
	return nil
}

// readSequenceFile parses FILE ("-" for stdin) as FASTA or CSV.
func readSequenceFile(path string) ([]string, error) {
	var r io.Reader = os.Stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	seqs, err := embedding.ParseSequenceFile(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return seqs, nil
}

// parseWithPositionals parses flags that may come before or after the
// positional arguments (`plan FILE --json`).
func parseWithPositionals(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parseFlags(fs, args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if rest[0] == "--" {
			return append(pos, rest[1:]...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}
