package main

import (
	"strings"
	"testing"
)

func TestParseReportsAndParts(t *testing.T) {
	perf := []byte("# comment\n     3.91%  [k] finish_task_switch.isra.0   -  -\n     0.98%  [.] modernc.org/sqlite/lib._pcache1FetchNoMutex  -  -\n")
	got := parsePerfReport(perf)
	if len(got) != 2 || got[0].sym != "[kernel] finish_task_switch.isra.0" || got[1].pct != 0.98 {
		t.Fatalf("perf rows %+v", got)
	}
	top := []byte("Showing nodes\n      flat  flat%   sum%        cum   cum%\n     1.20s 12.00% 12.00%      1.50s 15.00%  runtime.scanobject\n     0.50s  5.00% 17.00%      0.50s  5.00%  gorm.io/gorm.(*DB).Find\n")
	rows := parsePprofTop(top)
	if len(rows) != 2 || rows[0].sym != "runtime.scanobject" || rows[1].pct != 5 {
		t.Fatalf("pprof rows %+v", rows)
	}
	var sum strings.Builder
	writeParts(&sum, "x", append(got, rows...), 100)
	for _, want := range []string{"kernel", "SQLite (modernc.org", "Go GC and allocation", "SQLite driver and GORM"} {
		if !strings.Contains(sum.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, sum.String())
		}
	}
}

func TestPersistenceOpsPerJob(t *testing.T) {
	line := `persistence_requests{operation="GetCurrentClusterMetadata",service_name="history"} 42`
	if label(line, "operation") != "GetCurrentClusterMetadata" || label(line, "nope") != "?" {
		t.Fatal("label")
	}
	before := persistenceOps{"a": 10, "b": 5}
	after := persistenceOps{"a": 30, "b": 5, "c": 4}
	total, by := after.perJob(before, 2)
	if total != 12 || by["a"] != 10 || by["c"] != 2 || len(by) != 2 {
		t.Fatalf("total %v by %v", total, by)
	}
	if !strings.HasPrefix(by.String(), "   10.00  a\n") {
		t.Fatalf("%q", by.String())
	}
}
