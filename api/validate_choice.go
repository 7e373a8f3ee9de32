package api

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/kinflow/kinflow/internal/input"
	"github.com/kinflow/kinflow/internal/similarity"
)

// validateChoice reads the optional `targets` and `methods` of a /validate/
// request, with /submit/'s checks of targets and methods and their errors:
// nil when the request chose none (the report then covers every method, as
// the reference deployment's /validate/ always does), else the chosen
// method keys in target order.
func (s *Server) validateChoice(b *requestBody) ([]string, *input.Options, error) {
	raw, err := b.options()
	if err != nil || !raw.Chosen() {
		return nil, nil, err
	}
	opts, err := input.ValidateOptions(s.cat, raw)
	if err != nil {
		return nil, nil, err
	}
	keys := []string{}
	for _, t := range opts.Targets {
		if k := opts.MethodFor(t); !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	return keys, &opts, nil
}

// similarityFor is /validate/'s similarity answer: every present dataset
// when the request chose no methods, else only the datasets of the chosen
// methods; a chosen method without an installed dataset is information
// (ErrorObject.Unavailable), never a failure.
func (s *Server) similarityFor(ctx context.Context, rows []string, keys []string) any {
	svc := s.deps.Similarity
	if keys == nil {
		return svc.Analyze(ctx, rows)
	}
	var use []similarity.Dataset
	var missing []string
	for _, k := range keys {
		d, ok := svc.DatasetFor(k)
		switch {
		case !ok:
			missing = append(missing, fmt.Sprintf("method %s has no similarity dataset", k))
		case !d.Present():
			missing = append(missing, fmt.Sprintf("the similarity dataset %s of method %s is not installed on this server", d.Label, k))
		case !slices.ContainsFunc(use, func(x similarity.Dataset) bool { return x.Label == d.Label }):
			use = append(use, d)
		}
	}
	if len(use) == 0 {
		msg := strings.Join(missing, "; ")
		return similarity.ErrorObject{Error: strings.ToUpper(msg[:1]) + msg[1:] + ".", Unavailable: true}
	}
	return svc.AnalyzeDatasets(ctx, rows, use)
}

// finishReport narrows the report to the chosen methods (nil: all) and
// writes its messages, the similarity answer's included.
func finishReport(rep *input.ValidateReport, keys []string) {
	rep.RestrictTo(keys)
	rep.Methods = keys
	rep.Messages = input.BuildMessages(rep)
	switch sim := rep.Similarity.(type) {
	case similarity.ErrorObject:
		rep.Messages = append(rep.Messages, input.SimilarityMessage(sim.Error, sim.Unavailable))
	case *input.SimilarityError:
		rep.Messages = append(rep.Messages, input.SimilarityMessage(sim.Error, sim.Unavailable))
	}
}
