package similarity

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Messages of /validate/'s similarity error object (paraphrased from the
// reference; not part of the contract's verbatim values).
const (
	NoDatasetsMessage = "No similarity datasets are available on this server: none of the configured training-set FASTA files exists."
	TimeoutMessage    = "The similarity analysis did not finish within %d seconds. The sequences searched so far are cached: send the request again to continue."
	FailedMessage     = "The similarity analysis failed."
)

// ValidateBatch is the batch size of Analyze's searches: a batch is cached
// only when it ends, so it must end well within the validate timeout. 200
// queries take about 30 s against 20,000 training sequences on two busy
// cores (docs/BENCHMARKS.md), of which about 10 s is mmseqs' fixed cost per
// call.
const ValidateBatch = 200

// Service is the similarity analysis of one process: its datasets and
// searcher, and the bound on /validate/'s searches.
type Service struct {
	Searcher *Searcher
	// Datasets in configured order, FASTA paths resolved.
	Datasets []Dataset
	// ValidateTimeout bounds Analyze as a whole: reading the cache, a
	// database build it has to wait for (which goes on after the bound), and
	// its searches.
	ValidateTimeout time.Duration

	// gate lets one Analyze search at a time per process, so that large
	// uploads queue behind each other instead of sharing the CPU; a
	// request whose sequences are all cached never waits for it.
	gate chan struct{}
}

// NewService builds the service.
func NewService(s *Searcher, datasets []Dataset, validateTimeout time.Duration) *Service {
	return &Service{Searcher: s, Datasets: datasets, ValidateTimeout: validateTimeout, gate: make(chan struct{}, 1)}
}

// Present returns the datasets whose FASTA exists.
func (s *Service) Present() []Dataset {
	var out []Dataset
	for _, d := range s.Datasets {
		if d.Present() {
			out = append(out, d)
		}
	}
	return out
}

// DatasetFor returns the dataset serving method key (present or not).
func (s *Service) DatasetFor(key string) (Dataset, bool) {
	for _, d := range s.Datasets {
		if slices.Contains(d.Methods, key) {
			return d, true
		}
	}
	return Dataset{}, false
}

// Analysis is /validate/'s similarity object: one Summary per dataset
// label, in configured order.
type Analysis []LabelSummary

// LabelSummary is one entry of an Analysis.
type LabelSummary struct {
	Label   string
	Summary Summary
}

// MarshalJSON writes the entries as one object in order.
func (a Analysis) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, e := range a {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(e.Label)
		v, err := json.Marshal(e.Summary)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// ErrorObject is the similarity field when the analysis cannot answer.
// Unavailable (kinflow's addition) marks the answer "no dataset for this
// request": information for the user, not a failure of the analysis.
type ErrorObject struct {
	Error       string `json:"error"`
	Unavailable bool   `json:"unavailable,omitempty"`
}

// Analyze is /validate/'s runSimilarity (docs/similarity.md): rows are the
// non-empty Protein Sequence cells (one per row, duplicates included);
// each present dataset gets the histograms of the rows' max and mean
// identities. What the cache holds is answered at once; the rest is
// searched one request at a time per process, within ValidateTimeout.
// The result is an Analysis, or an ErrorObject with a message for the user.
func (s *Service) Analyze(ctx context.Context, rows []string) any {
	return s.AnalyzeDatasets(ctx, rows, s.Present())
}

// AnalyzeDatasets is Analyze against the given datasets only (those of the
// methods a /validate/ request chose); none is the "no dataset" answer.
func (s *Service) AnalyzeDatasets(ctx context.Context, rows []string, datasets []Dataset) any {
	if len(datasets) == 0 {
		return ErrorObject{Error: NoDatasetsMessage, Unavailable: true}
	}
	var seqs []string
	for _, r := range rows {
		if r != "" {
			seqs = append(seqs, r)
		}
	}
	if len(seqs) == 0 {
		return ErrorObject{Error: "No protein sequences to compare."}
	}
	timeout := s.ValidateTimeout
	if timeout <= 0 {
		timeout = time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var out Analysis
	held := false
	defer func() {
		if held {
			<-s.gate
		}
	}()
	for _, d := range datasets {
		res, err := s.Searcher.Cached(ctx, d, seqs)
		if err == nil && !allCached(res, seqs) {
			if !held {
				select {
				case s.gate <- struct{}{}:
					held = true
				case <-ctx.Done():
					err = ctx.Err()
				}
			}
			if err == nil {
				res, err = s.Searcher.SearchBatched(ctx, d, seqs, ValidateBatch)
			}
		}
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				return ErrorObject{Error: fmt.Sprintf(TimeoutMessage, int(timeout.Seconds()))}
			}
			s.Searcher.log().Error("similarity analysis failed", "event", "similarity.validate_failed", "dataset", d.Label, "error", err)
			return ErrorObject{Error: FailedMessage}
		}
		ids := make([]Identity, len(seqs))
		for i, q := range seqs {
			ids[i] = res[q]
		}
		out = append(out, LabelSummary{Label: d.Label, Summary: Summarize(ids)})
	}
	return out
}

func allCached(res map[string]Identity, seqs []string) bool {
	for _, q := range seqs {
		if _, ok := res[q]; !ok {
			return false
		}
	}
	return true
}

// Prepare builds the database of every present dataset, so that the first
// search does not pay for it; failures are logged and retried by the next
// search.
func (s *Service) Prepare(ctx context.Context) {
	for _, d := range s.Present() {
		if _, err := s.Searcher.BuildDir(ctx, d); err != nil && ctx.Err() == nil {
			s.Searcher.log().Error("similarity database build failed", "event", "similarity.db_build_failed", "dataset", d.Label, "error", err)
		}
	}
}
