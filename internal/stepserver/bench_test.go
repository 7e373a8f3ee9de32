package stepserver

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// BenchmarkDo measures one batch through a warm server: a manifest line
// out, an answer back (the fake server parses the line, as a real one does).
func BenchmarkDo(b *testing.B) {
	b.Run("empty", func(b *testing.B) { benchDo(b, batchLine(1, "done")) })
	// About 40 KB: ten sequences of 4,000 residues.
	b.Run("40KB", func(b *testing.B) { benchDo(b, manifestLine(10, 4000)) })
}

func manifestLine(n, residues int) []byte {
	seq := strings.Repeat("M", residues)
	var sb strings.Builder
	sb.WriteString(`{"version": 1, "job_id": "j", "step_key": "k", "batch": 1, "act": "done", "seqs": [`)
	for i := range n {
		if i > 0 {
			sb.WriteString(",")
		}
		sb.WriteString(`{"seq_id": "0123456789ab", "sequence": "` + seq + `"}`)
	}
	sb.WriteString("]}")
	return []byte(sb.String())
}

func benchDo(b *testing.B, line []byte) {
	p := NewPool(Options{KillGrace: time.Second, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer p.Close()
	spec := fakeSpec("k")
	if _, err := p.Do(context.Background(), spec, 1, line, nil); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if _, err := p.Do(context.Background(), spec, 1, line, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStart measures starting a server up to its ready line and
// stopping it (fake server: no model to load), what a restart costs beyond
// the model's own load time.
func BenchmarkStart(b *testing.B) {
	p := NewPool(Options{Max: 1, KillGrace: time.Second, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer p.Close()
	specs := []Spec{fakeSpec("a"), fakeSpec("b")}
	line := batchLine(1, "done")
	b.ResetTimer()
	for i := range b.N {
		// Max=1: each Do evicts the other key's server and starts its own.
		if _, err := p.Do(context.Background(), specs[i%2], 1, line, nil); err != nil {
			b.Fatal(err)
		}
	}
}
