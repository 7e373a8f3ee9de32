package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// fillEvents stores `jobs` other jobs with two gpu_precompute events each (the
// shape a server's table takes after many small jobs), then the job id with
// two of its own, and returns id.
func fillEvents(tb testing.TB, s *store.Store, jobs int) string {
	tb.Helper()
	ctx := context.Background()
	at := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	const batch = 500
	for from := 0; from < jobs; from += batch {
		var jv, ev []string
		var ja, ea []any
		for i := from; i < min(from+batch, jobs); i++ {
			id := fmt.Sprintf("other%07d", i)
			jv = append(jv, "(?, 0, ?, ?)")
			ja = append(ja, id, store.JobCompleted, at)
			for k := range 2 {
				ev = append(ev, "(?, ?, ?, ?)")
				ea = append(ea, id, store.EventGPUPrecompute, at.Add(time.Duration(2*i+k)*time.Millisecond), "other")
			}
		}
		if err := s.DB.WithContext(ctx).Exec("INSERT INTO jobs (id, key_id, status, submitted_at) VALUES "+strings.Join(jv, ", "), ja...).Error; err != nil {
			tb.Fatal(err)
		}
		if err := s.DB.WithContext(ctx).Exec("INSERT INTO job_events (job_id, kind, created_at, reason) VALUES "+strings.Join(ev, ", "), ea...).Error; err != nil {
			tb.Fatal(err)
		}
	}
	// The job read is the oldest: a walk of the kind's events newest first
	// meets it last.
	const id = "aaajobread"
	if err := s.CreateJob(ctx, &store.Job{ID: id, Status: store.JobProcessing, SubmittedAt: at}, []store.JobStage{{JobID: id, Index: 0, Target: "kcat", MethodKey: "B", Status: "running"}}); err != nil {
		tb.Fatal(err)
	}
	for k, r := range []string{"submitted", "cache_complete"} {
		if _, err := s.AddEvent(ctx, &store.JobEvent{JobID: id, Kind: store.EventGPUPrecompute, Reason: r, CreatedAt: at.Add(-time.Duration(2-k) * time.Second)}, 20); err != nil {
			tb.Fatal(err)
		}
	}
	return id
}

// A job's events are read from its own index entries, not by walking every
// event of their kind: SQLite's plan for the status read and the trim names
// the job.
func TestJobEventsReadByJob(t *testing.T) {
	s := testenv.OpenStore(t, store.SQLite)
	for _, q := range []string{
		"SELECT * FROM job_events WHERE job_id = 'x' AND kind = 'gpu_precompute' ORDER BY created_at DESC, id DESC LIMIT 20",
		"SELECT id FROM job_events WHERE job_id = 'x' AND kind = 'gpu_precompute' ORDER BY id DESC LIMIT -1 OFFSET 20",
		"DELETE FROM job_events WHERE job_id = 'x' AND kind = 'gpu_precompute'",
	} {
		var plan []struct {
			ID, Parent, Notused int
			Detail              string
		}
		if err := s.DB.Raw("EXPLAIN QUERY PLAN " + q).Scan(&plan).Error; err != nil {
			t.Fatal(err)
		}
		var details []string
		for _, p := range plan {
			details = append(details, p.Detail)
		}
		if d := strings.Join(details, "; "); !strings.Contains(d, "(job_id=? AND kind=?)") {
			t.Errorf("%s\n  plan: %s; want a search on job_id and kind", q, d)
		}
	}
}

// A job's events come back whole and in order among many others' (the
// benchmark below times the same reads against 100,000).
func TestJobEventsAmongMany(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		id := fillEvents(t, s, 2000)
		ev, err := s.GPUPrecomputeEvents(context.Background(), id, 20)
		if err != nil {
			t.Fatal(err)
		}
		if len(ev) != 2 || ev[0].Reason != "submitted" || ev[1].Reason != "cache_complete" {
			t.Fatalf("events %+v, want the job's two, oldest first", ev)
		}
	})
}

// BenchmarkJobEventsAmongMany: one job's events read as a status read reads
// them, and one event recorded (AddEvent with its trim), among the events of
// 50,000 other jobs.
func BenchmarkJobEventsAmongMany(b *testing.B) {
	for _, d := range []store.Dialect{store.SQLite, store.Postgres} {
		b.Run(string(d), func(b *testing.B) {
			s := testenv.OpenStore(b, d)
			id := fillEvents(b, s, 50000)
			ctx := context.Background()
			b.Run("status-read", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if ev, err := s.GPUPrecomputeEvents(ctx, id, 20); err != nil || len(ev) != 2 {
						b.Fatal(len(ev), err)
					}
				}
			})
			b.Run("add-event", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := s.AddEvent(ctx, &store.JobEvent{JobID: id, Kind: store.EventGPUPrecompute, Reason: "x", CreatedAt: time.Now()}, 20); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// Recording an event trims its kind to the newest keep: the oldest go, the
// newest stay, and other kinds and jobs are untouched.
func TestAddEventTrimsToNewest(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		now := time.Now().UTC()
		for _, id := range []string{"jobtrim", "jobother"} {
			if err := s.CreateJob(ctx, &store.Job{ID: id, Status: store.JobProcessing, SubmittedAt: now}, nil); err != nil {
				t.Fatal(err)
			}
		}
		add := func(job, kind, reason string) {
			t.Helper()
			if stored, err := s.AddEvent(ctx, &store.JobEvent{JobID: job, Kind: kind, Reason: reason, CreatedAt: now}, 5); err != nil || !stored {
				t.Fatalf("stored %v, %v", stored, err)
			}
		}
		add("jobother", store.EventGPUPrecompute, "other")
		add("jobtrim", "x", "other kind")
		for i := range 8 {
			add("jobtrim", store.EventGPUPrecompute, fmt.Sprint(i))
		}
		var reasons []string
		s.DB.Model(&store.JobEvent{}).Where("job_id = ? AND kind = ?", "jobtrim", store.EventGPUPrecompute).Order("id").Pluck("reason", &reasons)
		if strings.Join(reasons, ",") != "3,4,5,6,7" {
			t.Fatalf("kept %v, want the newest five (3…7)", reasons)
		}
		var n int64
		s.DB.Model(&store.JobEvent{}).Where("reason = ?", "other").Or("reason = ?", "other kind").Count(&n)
		if n != 2 {
			t.Fatalf("%d of the other job's and other kind's events left, want 2", n)
		}
	})
}

// Migration 0012 makes an event key unique: copies that a race of the old
// count-then-insert left are dropped (the oldest kept) before the unique
// index is built, and events without a key stay as they are.
func TestMigrationDropsDuplicateEventKeys(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		now := time.Now().UTC()
		if err := s.CreateJob(ctx, &store.Job{ID: "jobdup", Status: store.JobProcessing, SubmittedAt: now}, nil); err != nil {
			t.Fatal(err)
		}
		// The database as it was before 0012.
		for _, q := range []string{
			"DROP INDEX idx_job_events_job_key",
			"CREATE INDEX idx_job_events_job_key ON job_events (job_id, event_key)",
			"DELETE FROM migrations WHERE id = '0012_event_key_unique'",
		} {
			if err := s.DB.Exec(q).Error; err != nil {
				t.Fatal(err)
			}
		}
		for _, r := range []string{"first", "copy", "copy", "keyless", "keyless"} {
			key := "run:1"
			if r == "keyless" {
				key = ""
			}
			if err := s.DB.Exec("INSERT INTO job_events (job_id, stage_index, kind, method_key, target, attempted, used_gpu, completed, failed, reason, message, created_at, event_key) VALUES (?, 0, ?, '', '', false, false, false, false, ?, '', ?, ?)",
				"jobdup", store.EventGPUPrecompute, r, now, key).Error; err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		var reasons []string
		s.DB.Model(&store.JobEvent{}).Where("job_id = ?", "jobdup").Order("id").Pluck("reason", &reasons)
		if strings.Join(reasons, ",") != "first,keyless,keyless" {
			t.Fatalf("after the migration: %v, want first,keyless,keyless", reasons)
		}
		if stored, err := s.AddEvent(ctx, &store.JobEvent{JobID: "jobdup", Kind: store.EventGPUPrecompute, CreatedAt: now, Key: "run:1"}, 20); err != nil || stored {
			t.Fatalf("a stored key recorded again: stored %v, %v", stored, err)
		}
	})
}
