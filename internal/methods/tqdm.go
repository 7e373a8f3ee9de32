package methods

import (
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// ProgressForm is how a method's program reports its progress.
type ProgressForm string

// Progress forms.
const (
	// ProgressLines (the default) reads `Progress: <done>/<total>` lines
	// on stdout.
	ProgressLines ProgressForm = "lines"
	// ProgressTqdm also reads tqdm progress bars, on stdout and stderr:
	// the outermost of nested bars counts (CatPred's loop over its
	// ensemble's models, with a bar over each model's batches nested
	// under it), its inner bar's fraction adding to the outer's count.
	// Bars that nest no other bar (reading the input, validating it) are
	// not counted. `Progress:` lines are read as well.
	ProgressTqdm ProgressForm = "tqdm"
)

// tqdmBar is one status line of a tqdm bar.
type tqdmBar struct {
	// Pos is the bar's line below the cursor's (0 for the outermost): the
	// number of cursor-up escapes tqdm writes after a nested bar's text.
	Pos int
	// N is the count done; Total the bar's total, 0 when unknown (`9it`).
	N, Total int
	// Blank is a bar cleared from its line (a finished bar with
	// leave=False).
	Blank bool
}

// tqdmMaxSegment is the longest segment parsed; the rest of a longer one
// is dropped (a bar is well under it, a binary blob is not a bar).
const tqdmMaxSegment = 1024

// tqdmCount finds a bar's `n/total [elapsed` part; the last one counts (a
// description may hold a fraction of its own, "fold 1/5: ...").
var (
	tqdmCount   = regexp.MustCompile(`(?:^|\D)(\d{1,12})/(\d{1,12}) \[\d+:\d\d`)
	tqdmUnknown = regexp.MustCompile(`(?:^|[\s:|])(\d{1,12})[A-Za-z]* \[\d+:\d\d`)
)

// parseTqdmSegment reads one segment of tqdm output (the text between two
// carriage returns, newlines or cursor moves); false when it is no bar.
func parseTqdmSegment(seg string, pos int) (tqdmBar, bool) {
	b := tqdmBar{Pos: pos}
	s := strings.TrimSpace(seg)
	if s == "" {
		b.Blank = true
		return b, true
	}
	if ms := tqdmCount.FindAllStringSubmatch(s, -1); ms != nil {
		m := ms[len(ms)-1]
		n, err1 := strconv.Atoi(m[1])
		t, err2 := strconv.Atoi(m[2])
		if err1 != nil || err2 != nil {
			return b, false
		}
		b.N, b.Total = n, t
		return b, true
	}
	if ms := tqdmUnknown.FindAllStringSubmatch(s, -1); ms != nil {
		n, err := strconv.Atoi(ms[len(ms)-1][1])
		if err != nil {
			return b, false
		}
		b.N = n
		return b, true
	}
	return b, false
}

// tqdmScanner is an io.Writer that cuts a program's raw output into tqdm
// segments, whatever the write boundaries: a segment ends at "\r", "\n" or
// a cursor-up escape (ESC [ n A, which tqdm writes after a nested bar; the
// count of those escapes is the bar's position). Other escapes are
// skipped. Each segment that is a bar is passed to Bar. Never fails.
type tqdmScanner struct {
	Bar func(tqdmBar)

	seg      []byte
	skipping bool
	// ups counts the cursor-up escapes after the current segment's text.
	ups int
	// esc is a pending escape sequence (nil: none).
	esc    []byte
	inEsc  bool
	hasSeg bool
}

// Write implements io.Writer.
func (s *tqdmScanner) Write(p []byte) (int, error) {
	for _, c := range p {
		if s.inEsc {
			s.escByte(c)
			continue
		}
		switch c {
		case '\r', '\n':
			s.end()
		case 0x1b:
			s.inEsc, s.esc = true, s.esc[:0]
		default:
			if s.ups > 0 {
				// Text after a cursor move: the moved bar's segment
				// is over.
				s.end()
			}
			s.hasSeg = true
			if s.skipping {
				continue
			}
			if len(s.seg) >= tqdmMaxSegment {
				s.skipping, s.seg = true, s.seg[:0]
				continue
			}
			s.seg = append(s.seg, c)
		}
	}
	return len(p), nil
}

// escByte takes one byte of an escape sequence: CSI (ESC [ params final)
// or a two-byte escape; a cursor up (final A) ends the segment's text.
func (s *tqdmScanner) escByte(c byte) {
	s.esc = append(s.esc, c)
	if len(s.esc) == 1 {
		if c != '[' {
			s.inEsc = false
		}
		return
	}
	if c >= 0x40 && c <= 0x7e {
		s.inEsc = false
		if c == 'A' {
			n := 1
			if v, err := strconv.Atoi(string(s.esc[1 : len(s.esc)-1])); err == nil && v > 0 && v < 1000 {
				n = v
			}
			s.ups += n
			s.hasSeg = true
		}
		return
	}
	if len(s.esc) > 16 {
		// Not an escape of any terminal: give it up.
		s.inEsc = false
	}
}

// end parses the current segment, if any, and starts the next.
func (s *tqdmScanner) end() {
	if s.hasSeg && !s.skipping && s.Bar != nil {
		if b, ok := parseTqdmSegment(string(s.seg), s.ups); ok {
			s.Bar(b)
		}
	}
	s.seg, s.skipping, s.ups, s.hasSeg = s.seg[:0], false, 0, false
}

// Flush parses a last segment without an ending.
func (s *tqdmScanner) Flush() { s.end() }

// tqdmProgress maps a stream of bars to the fraction of the run done, as
// the reference's engine does for CatPred: its ensemble's models are the
// outer bar (models done, plus the batch bar's fraction of the current
// model), and nothing else counts. The fraction never goes back.
type tqdmProgress struct {
	mu sync.Mutex
	// n0, t0 are the outermost bar's count and total.
	n0, t0 int
	// nested is set once a bar was seen under the current outermost one.
	nested bool
	inner  float64
	best   float64
}

// Add takes one bar; it returns the fraction done and true when it grew.
func (p *tqdmProgress) Add(b tqdmBar) (float64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case b.Pos == 0 && b.Blank:
		return 0, false
	case b.Pos == 0:
		if b.Total != p.t0 || b.N < p.n0 {
			// Another bar, or the same one restarted: what it
			// nests decides again whether it counts.
			p.nested, p.inner = false, 0
		} else if b.N != p.n0 {
			p.inner = 0
		}
		p.n0, p.t0 = b.N, b.Total
	default:
		if p.t0 <= 0 {
			return 0, false
		}
		p.nested = true
		if b.Pos == 1 {
			p.inner = 0
			if !b.Blank && b.Total > 0 {
				p.inner = min(1, float64(b.N)/float64(b.Total))
			}
		}
	}
	if !p.nested || p.t0 <= 0 {
		return 0, false
	}
	f := 1.0
	if p.n0 < p.t0 {
		f = min(1, (float64(p.n0)+p.inner)/float64(p.t0))
	}
	if f <= p.best {
		return 0, false
	}
	p.best = f
	return f, true
}
