package embedjob

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/kinflow/kinflow/internal/mediaroot"
)

// JobLogs keeps the per-job step logs, <Dir>/<job_id>.log, in the
// reference GPU service's format (docs/gpu-host.md, "Step log"): every line prefixed by a UTC timestamp
// (YYYY-MM-DDTHH:MM:SS.ffffffZ) and the markers JOB_QUEUED, JOB_START,
// STEP_START, "$ <command>", [stdout], [stderr], STEP_DONE, STEP_FAILED,
// JOB_DONE, JOB_FAILED.
type JobLogs struct {
	Dir string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Path is the log file of jobID.
func (l *JobLogs) Path(jobID string) string { return filepath.Join(l.Dir, jobID+".log") }

// MissingPath is the file listing every file a step of jobID left missing
// (StepResult.MissingList).
func (l *JobLogs) MissingPath(jobID, step string) string {
	return filepath.Join(l.Dir, jobID+"."+step+".missing")
}

// Open opens jobID's log for appending. jobID is a GPU job id, or the
// "local-<job id>" the CPU worker's local steps use: any id that is a safe
// file name (CheckSeqID's rule).
func (l *JobLogs) Open(jobID string) (*JobLog, error) {
	if err := CheckSeqID(jobID); err != nil {
		return nil, fmt.Errorf("job log for %q: %w", jobID, err)
	}
	if err := mediaroot.MkdirAll(l.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("create job log dir: %w", err)
	}
	f, err := os.OpenFile(l.Path(jobID), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open job log: %w", err)
	}
	now := l.Now
	if now == nil {
		now = time.Now
	}
	return &JobLog{f: f, now: now}, nil
}

// Append writes one formatted line to jobID's log.
func (l *JobLogs) Append(jobID, format string, args ...any) error {
	jl, err := l.Open(jobID)
	if err != nil {
		return err
	}
	jl.Printf(format, args...)
	return jl.Close()
}

// Tail returns the last n lines of jobID's log (os.ErrNotExist when there is
// no log). It reads backwards from the end, so a long log costs only its tail.
func (l *JobLogs) Tail(jobID string, n int) ([]string, error) {
	if err := CheckSeqID(jobID); err != nil {
		return nil, err
	}
	return tailFile(l.Path(jobID), n)
}

// Contains reports whether jobID's log has a line containing marker.
func (l *JobLogs) Contains(jobID, marker string) bool {
	data, err := os.ReadFile(l.Path(jobID))
	return err == nil && bytes.Contains(data, []byte(marker))
}

func tailFile(path string, n int) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	const chunk = 64 * 1024
	var buf []byte
	off := st.Size()
	for off > 0 && bytes.Count(buf, []byte{'\n'}) <= n {
		step := min(int64(chunk), off)
		off -= step
		b := make([]byte, step)
		if _, err := f.ReadAt(b, off); err != nil && err != io.EOF {
			return nil, err
		}
		buf = append(b, buf...)
	}
	lines := strings.Split(strings.TrimRight(string(buf), "\n"), "\n")
	if len(lines) == 1 && lines[0] == "" {
		return nil, nil
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines, nil
}

// JobLog is one open job log; safe for concurrent use (a program's stdout and
// stderr are copied into it at once).
type JobLog struct {
	mu  sync.Mutex
	f   *os.File
	now func() time.Time
}

// Printf writes one line (newlines inside become separate lines, each with
// its own timestamp). Write errors are dropped: a full log disk must not
// fail an embedding.
func (j *JobLog) Printf(format string, args ...any) {
	if j == nil {
		return
	}
	msg := fmt.Sprintf(format, args...)
	ts := j.now().UTC().Format("2006-01-02T15:04:05.000000Z")
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimRight(msg, "\n"), "\n") {
		b.WriteString(ts)
		b.WriteByte(' ')
		b.WriteString(line)
		b.WriteByte('\n')
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	_, _ = j.f.WriteString(b.String())
}

// Close closes the file.
func (j *JobLog) Close() error {
	if j == nil {
		return nil
	}
	return j.f.Close()
}

// CheckJobID accepts a GPU job id: 32 lowercase hex characters (a uuid4
// hex). It is also a file name, so nothing else is allowed.
func CheckJobID(id string) error {
	if len(id) != 32 {
		return fmt.Errorf("invalid job id %q: want 32 lowercase hex characters", id)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) {
			return fmt.Errorf("invalid job id %q: want 32 lowercase hex characters", id)
		}
	}
	return nil
}
