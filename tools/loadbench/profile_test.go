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

func TestStacksByCallerAndCumulative(t *testing.T) {
	perf := []byte("\t ffff runtime.mallocgc\n\t ffff google.golang.org/protobuf/proto.Unmarshal\n\t ffff go.temporal.io/server/service/history.(*h).X\n\n" +
		"\t ffff finish_task_switch\n\t ffff runtime.gcBgMarkWorker\n\n")
	st := parsePerfScript(perf)
	if len(st) != 2 || len(st[0].frames) != 3 {
		t.Fatalf("perf stacks %+v", st)
	}
	by := byCaller(st)
	if by["protobuf"] != 50 || by["Go runtime on its own (GC workers, scheduler) and kernel"] != 50 {
		t.Fatalf("by caller %v", by)
	}
	if c := cumulative(st, []string{"service/history.", "gcBgMarkWorker"}); c["service/history."] != 50 || c["gcBgMarkWorker"] != 50 {
		t.Fatalf("cumulative %v", c)
	}
	traces := []byte("File: kinflow\n-----------+-------\n      30ms   runtime.memmove\n             database/sql.(*DB).conn\n             gorm.io/gorm.(*DB).Find\n-----------+-------\n      10ms   github.com/kinflow/kinflow/api.f\n")
	pt := parsePprofTraces(traces)
	if len(pt) != 2 || pt[0].weight != 30 || pt[0].frames[2] != "gorm.io/gorm.(*DB).Find" {
		t.Fatalf("pprof stacks %+v", pt)
	}
	if by := byCaller(pt); by["SQLite driver and GORM (kinflow's database)"] != 75 || by["kinflow"] != 25 {
		t.Fatalf("by caller %v", by)
	}
}
