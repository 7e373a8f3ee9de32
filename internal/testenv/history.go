package testenv

import (
	"os"
	"path/filepath"
	"testing"

	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
)

// RecordedHistory reads the recorded workflow history
// workflows/testdata/<name>.json (TestReplayManyUsersShapes records them).
func RecordedHistory(tb testing.TB, name string) *historypb.History {
	tb.Helper()
	f, err := os.Open(filepath.Join(RepoRoot(), "workflows", "testdata", name+".json"))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	h, err := client.HistoryFromJSON(f, client.HistoryJSONOptions{})
	if err != nil {
		tb.Fatalf("history %s: %v", name, err)
	}
	return h
}
