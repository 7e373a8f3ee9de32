package procio

import (
	"context"
	"os/exec"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func collect() (*LineWriter, *[]string) {
	var got []string
	return &LineWriter{Line: func(l string) { got = append(got, l) }}, &got
}

func TestLineWriterSplitsAndCuts(t *testing.T) {
	w, got := collect()
	long := strings.Repeat("x", MaxLine+100)
	for _, p := range []string{"a", "b\nc\r\n", "", "\n", long[:5000], long[5000:] + "\nd", "e"} {
		if n, err := w.Write([]byte(p)); n != len(p) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", p, n, err)
		}
	}
	w.Flush()
	want := []string{"ab", "c", "", strings.Repeat("x", MaxLine) + "…", "de"}
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("lines %q", *got)
	}
}

func TestLineWriterMax(t *testing.T) {
	w, got := collect()
	w.Max = 3
	_, _ = w.Write([]byte("abcdef\nxy\n"))
	if want := []string{"abc…", "xy"}; !reflect.DeepEqual(*got, want) {
		t.Errorf("lines %q", *got)
	}
}

// A program that exits while a process it started keeps stdout open: Wait
// returns after WaitDelay instead of waiting for that process.
func TestLineWriterDoesNotWaitForLeftoverHolders(t *testing.T) {
	w, got := collect()
	var stderr strings.Builder
	cmd := exec.CommandContext(context.Background(), "sh", "-c", "echo started; sleep 60 & echo $! >&2; exit 0")
	cmd.Stdout, cmd.Stderr = w, &stderr
	cmd.WaitDelay = 500 * time.Millisecond
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	w.Flush()
	if pid, perr := strconv.Atoi(strings.TrimSpace(stderr.String())); perr == nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("Wait took %v", took)
	}
	if err != nil && err != exec.ErrWaitDelay {
		t.Fatalf("Wait: %v", err)
	}
	if !reflect.DeepEqual(*got, []string{"started"}) {
		t.Errorf("lines %q", *got)
	}
}
