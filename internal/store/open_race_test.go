package store

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// TestOpenFreshSQLiteAtOnce: kinflow's roles started together on one SQLite
// file open a database that does not exist yet at the same moment, each in
// its own process; every open must succeed (a CI run saw an api exit at its
// start with "database is locked (5) (SQLITE_BUSY)" while the worker and
// the GPU host opened the same new file).
func TestOpenFreshSQLiteAtOnce(t *testing.T) {
	if path := os.Getenv("KINFLOW_TEST_OPEN_SQLITE"); path != "" {
		s, err := Open(context.Background(), "sqlite:"+path)
		if err == nil {
			err = s.Migrate(context.Background())
		}
		if err == nil {
			err = s.Close()
		}
		if err != nil {
			t.Fatal(err)
		}
		return
	}
	for round := range 60 {
		path := filepath.Join(t.TempDir(), "kinflow.db")
		var wg sync.WaitGroup
		outs := make([][]byte, 6)
		errs := make([]error, 6)
		for i := range errs {
			wg.Go(func() {
				cmd := exec.Command(os.Args[0], "-test.run=^TestOpenFreshSQLiteAtOnce$", "-test.count=1")
				cmd.Env = append(os.Environ(), "KINFLOW_TEST_OPEN_SQLITE="+path)
				outs[i], errs[i] = cmd.CombinedOutput()
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d, process %d: %v\n%s", round, i, err, outs[i])
			}
		}
	}
}
