// Package procio connects the output of the programs kinflow runs (method
// engines, GPU step programs) to its logs, line by line.
package procio

import (
	"bytes"
	"sync"
)

// MaxLine is the longest line passed on; a progress bar can print
// megabytes without a newline, and the log must stay readable.
const MaxLine = 8192

// LineWriter is an io.Writer that calls Line once per line written to it
// (without the line ending; cut to MaxLine bytes plus "…"). Set it as an
// exec.Cmd's Stdout or Stderr rather than reading a StdoutPipe: then Cmd.Wait
// returns once the program has exited and, at most Cmd.WaitDelay later, even
// when a process it left behind still holds the pipe open. Call Flush after
// Wait for a last line without a newline. Safe for concurrent use.
type LineWriter struct {
	Line func(line string)
	// Max, when positive, replaces MaxLine as the longest line passed on
	// (a protocol line may be longer than a log line should be).
	Max int

	mu  sync.Mutex
	buf []byte
	// skipping is set while the rest of an over-long line is dropped.
	skipping bool
}

// Write implements io.Writer; it never fails.
func (w *LineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		if !w.skipping {
			room := w.max() - len(w.buf)
			if len(chunk) > room {
				w.buf = append(w.buf, chunk[:room]...)
				w.emit(true)
				w.skipping = true
			} else {
				w.buf = append(w.buf, chunk...)
			}
		}
		if i < 0 {
			break
		}
		if !w.skipping {
			w.emit(false)
		}
		w.skipping = false
		p = p[i+1:]
	}
	return n, nil
}

// Flush passes on a last line that had no newline.
func (w *LineWriter) Flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) > 0 {
		w.emit(false)
	}
	w.skipping = false
}

func (w *LineWriter) max() int {
	if w.Max > 0 {
		return w.Max
	}
	return MaxLine
}

func (w *LineWriter) emit(cut bool) {
	line := string(bytes.TrimSuffix(w.buf, []byte("\r")))
	if cut {
		line += "…"
	}
	w.buf = w.buf[:0]
	if w.Line != nil {
		w.Line(line)
	}
}
