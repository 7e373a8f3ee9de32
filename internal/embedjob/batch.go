package embedjob

import "sort"

// SeqItem is one sequence of a step as an executor sees it.
type SeqItem struct {
	SeqID string `json:"seq_id"`
	// Sequence is what the model gets: the submitted sequence, or its
	// TruncateLong form when it is longer than the step's model accepts.
	Sequence string `json:"sequence"`
	// OriginalLength is the submitted sequence's length.
	OriginalLength int `json:"original_length"`
	// Truncated says Sequence is the TruncateLong form.
	Truncated bool `json:"truncated"`
	// Outputs are every file the step writes for this sequence.
	Outputs []string `json:"outputs"`
	// MissingOutputs are the Outputs absent when the batch started; a program
	// may write only these.
	MissingOutputs []string `json:"missing_outputs"`
}

// ExtraTokensPerSeq is what a model adds to each sequence (BOS and EOS, as
// ESM's and ProtT5's tokenisers do); it counts against the token budget.
const ExtraTokensPerSeq = 2

// seqTokens is the token count of one item.
func seqTokens(it SeqItem) int { return len(it.Sequence) + ExtraTokensPerSeq }

// PackBatches sorts items by length, longest first, and packs them into
// batches as fair-esm's FastaBatchedDataset.get_batch_indices does: a batch's
// cost is its padded size, (longest item's tokens) × (items), and must stay
// within budget. An item alone over the budget forms its own batch (it must
// run; only a split can help it, and it cannot be split). maxSeqs > 0 also
// caps the items per batch. Ties keep seq_id order, so packing is
// deterministic.
func PackBatches(items []SeqItem, budget, maxSeqs int) [][]SeqItem {
	sorted := append([]SeqItem(nil), items...)
	sort.SliceStable(sorted, func(i, j int) bool {
		li, lj := len(sorted[i].Sequence), len(sorted[j].Sequence)
		if li != lj {
			return li > lj
		}
		return sorted[i].SeqID < sorted[j].SeqID
	})
	var (
		out    [][]SeqItem
		cur    []SeqItem
		curMax int
	)
	for _, it := range sorted {
		t := seqTokens(it)
		m := max(curMax, t)
		if len(cur) > 0 && (m*(len(cur)+1) > budget || (maxSeqs > 0 && len(cur) >= maxSeqs)) {
			out = append(out, cur)
			cur, m = nil, t
		}
		cur = append(cur, it)
		curMax = m
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// BatchCost is a batch's padded token count.
func BatchCost(b []SeqItem) int {
	m := 0
	for _, it := range b {
		m = max(m, seqTokens(it))
	}
	return m * len(b)
}
