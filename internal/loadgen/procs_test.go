package loadgen

import (
	"os"
	"testing"
	"time"
)

func TestCPUTimeOfThisProcess(t *testing.T) {
	before, err := CPUTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(50 * time.Millisecond); time.Now().Before(end); {
	}
	after, err := CPUTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after < before || after == 0 {
		t.Fatalf("CPU time %v then %v", before, after)
	}
	if _, err := statFields([]byte("12 (a) b) S 1 2 3 4 5 6 7 8 9 10 11 12 13")); err != nil {
		t.Fatal(err)
	}
}

// Creating files is system time: SystemTime grows with it, and never
// exceeds CPUTime.
func TestSystemTimeOfThisProcess(t *testing.T) {
	before, err := SystemTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for i := 0; i < 3000; i++ {
		f, err := os.CreateTemp(dir, "f")
		if err != nil {
			t.Fatal(err)
		}
		_ = f.Close()
		_ = os.Remove(f.Name())
	}
	after, err := SystemTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	total, err := CPUTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after <= before || after > total {
		t.Fatalf("system time %v then %v, CPU time %v", before, after, total)
	}
}

// A stopped deployment's temporary folder stays until RemoveStopped; a
// folder the caller gave is never removed.
func TestStopLeavesTheFolderUntilRemoveStopped(t *testing.T) {
	temp, given := t.TempDir()+"/dev", t.TempDir()
	for _, dir := range []string{temp, given} {
		if err := os.MkdirAll(dir+"/media", 0o755); err != nil {
			t.Fatal(err)
		}
	}
	(&Dev{Dir: temp, temp: true}).Stop()
	(&Dev{Dir: given}).Stop()
	if _, err := os.Stat(temp + "/media"); err != nil {
		t.Fatalf("Stop removed the folder: %v", err)
	}
	RemoveStopped()
	if _, err := os.Stat(temp); !os.IsNotExist(err) {
		t.Fatalf("RemoveStopped left the folder: %v", err)
	}
	if _, err := os.Stat(given + "/media"); err != nil {
		t.Fatalf("a given folder was removed: %v", err)
	}
}
