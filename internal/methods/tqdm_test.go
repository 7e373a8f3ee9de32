package methods

import (
	"bytes"
	"os"
	"testing"
)

// feed writes data to a scanner in chunks of size (0: whole) and returns
// the fractions the estimator reported.
func feed(data []byte, size int) []float64 {
	est := &tqdmProgress{}
	var got []float64
	s := &tqdmScanner{Bar: func(b tqdmBar) {
		if f, ok := est.Add(b); ok {
			got = append(got, f)
		}
	}}
	if size <= 0 {
		size = len(data) + 1
	}
	for len(data) > 0 {
		n := min(size, len(data))
		s.Write(data[:n])
		data = data[n:]
	}
	s.Flush()
	return got
}

// TestTqdmRecordedCatPred reads tqdm output recorded from real tqdm
// (testdata/tqdm_record.py: CatPred's order of bars, 120 rows, 10 models
// of 3 batches each), written in any chunks: the bars over the input rows
// count for nothing, the model bar and its nested batch bars give a
// growing fraction that reaches 1 only with the last model.
func TestTqdmRecordedCatPred(t *testing.T) {
	data, err := os.ReadFile("testdata/tqdm_catpred.stderr")
	if err != nil {
		t.Fatal(err)
	}
	whole := feed(data, 0)
	if len(whole) < 8 {
		t.Fatalf("fractions %v: want one at least per model", whole)
	}
	for i, f := range whole {
		if f <= 0 || f > 1 || (i > 0 && f <= whole[i-1]) {
			t.Fatalf("fractions %v: not growing within (0, 1]", whole)
		}
		if f == 1 && i != len(whole)-1 {
			t.Fatalf("fractions %v: 1 before the end", whole)
		}
	}
	if whole[0] > 0.1 || whole[len(whole)-1] != 1 {
		t.Fatalf("fractions %v: want the first within the first model and the last 1", whole)
	}
	// The input bars reach 120/120 before the models start: had they
	// counted, the first fraction would be 1.
	if idx := bytes.Index(data, []byte("0/10 [")); idx < 0 || len(feed(data[:idx], 0)) != 0 {
		t.Fatal("the bars before the model bar gave progress")
	}
	for _, size := range []int{1, 2, 3, 7, 64, 1000} {
		if got := feed(data, size); !equalFloats(got, whole) {
			t.Fatalf("chunks of %d: %v, whole: %v", size, got, whole)
		}
	}
}

func equalFloats(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestTqdmSegments(t *testing.T) {
	for _, c := range []struct {
		in   string
		want tqdmBar
		ok   bool
	}{
		{" 45%|####5     | 9/20 [00:01<00:02,  4.51it/s]", tqdmBar{N: 9, Total: 20}, true},
		{"  0%|          | 0/7 [00:00<?, ?it/s]", tqdmBar{N: 0, Total: 7}, true},
		{"fold 1/5: embed:  40%|████      | 2/5 [00:00<00:00, 96.13it/s, loss=0.3]", tqdmBar{N: 2, Total: 5}, true},
		{"9it [00:01,  4.51it/s]", tqdmBar{N: 9}, true},
		{"reading: 12rows [01:02:03, 1.00rows/s]", tqdmBar{N: 12}, true},
		{"    ", tqdmBar{Blank: true}, true},
		{"Loading data", tqdmBar{}, false},
		{"Progress: 3/4", tqdmBar{}, false},
		{"99999999999999999999/3 [00:00", tqdmBar{}, false},
	} {
		got, ok := parseTqdmSegment(c.in, 0)
		if ok != c.ok || (ok && got != c.want) {
			t.Errorf("%q: %+v %v, want %+v %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

// TestTqdmNesting: the position of a bar is the count of cursor-up escapes
// after it; a restarted outer bar must nest again before it counts, and a
// flat bar never counts.
func TestTqdmNesting(t *testing.T) {
	bar := func(n, total int) string {
		return "\r 50%|##   | " + itoa(n) + "/" + itoa(total) + " [00:01<00:01, 1.00it/s]"
	}
	inner := func(n, total int) string { return "\n" + bar(n, total) + "\x1b[A" }
	var out bytes.Buffer
	out.WriteString(bar(0, 50) + bar(50, 50) + "\n") // a flat bar: nothing
	out.WriteString(bar(0, 2) + inner(0, 4) + inner(2, 4) + inner(4, 4) + "\n\r    \x1b[A" + bar(1, 2))
	out.WriteString(inner(1, 4) + "\x1b[31m" + inner(3, 4) + "\x1b[0m" + "\x1b]junk")
	out.WriteString(bar(2, 2) + "\n")
	got := feed(out.Bytes(), 0)
	want := []float64{0.25, 0.5, 0.625, 0.875, 1}
	if !equalFloats(got, want) {
		t.Fatalf("fractions %v, want %v", got, want)
	}
	// A restart after the end never moves progress back.
	out.WriteString(bar(0, 3) + inner(1, 2))
	if got := feed(out.Bytes(), 5); !equalFloats(got, want) {
		t.Fatalf("after a restart: %v, want %v", got, want)
	}
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + itoa(n%10)
}

// FuzzTqdmScanner: any output, written in any chunks, never fails the
// scanner, and the fractions it gives grow within (0, 1] and do not
// depend on the write boundaries.
func FuzzTqdmScanner(f *testing.F) {
	if data, err := os.ReadFile("testdata/tqdm_catpred.stderr"); err == nil {
		f.Add(data, uint8(3))
	}
	f.Add([]byte("\r  0%|   | 0/2 [00:00<?, ?it/s]\n\r 0%| | 0/3 [00:00<?, ?it/s]\x1b[A\r 1/3 [00:01<00:01, 1it/s]\x1b[2A"), uint8(1))
	f.Add([]byte("\x1b[999999999999A\r9it [00:01, 4.51it/s]\x1b[\r\n"), uint8(0))
	f.Add([]byte("5/3 [00:00\n\r\x1b[A 7/0 [00:00\x1b[A\r"), uint8(2))
	f.Fuzz(func(t *testing.T, data []byte, size uint8) {
		whole := feed(data, 0)
		for i, v := range whole {
			if v <= 0 || v > 1 || (i > 0 && v <= whole[i-1]) {
				t.Fatalf("fractions %v", whole)
			}
		}
		if got := feed(data, int(size)); !equalFloats(got, whole) {
			t.Fatalf("chunks of %d: %v, whole %v", size, got, whole)
		}
	})
}
