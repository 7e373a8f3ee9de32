package store_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// holdStoreEnv, in a child's environment, makes the test binary open the
// store at its URL, say "open" and wait until killed.
const holdStoreEnv = "KINFLOW_TEST_HOLD_STORE"

func TestMain(m *testing.M) {
	if url := os.Getenv(holdStoreEnv); url != "" {
		s, err := store.Open(context.Background(), url)
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		_ = s
		fmt.Println("open")
		select {}
	}
	os.Exit(m.Run())
}

// TestSeesAllWritesSQLite: a SQLite store hears of every write only while no
// other Store, of this process or of another, has the file open; a process
// that dies leaves nothing behind.
func TestSeesAllWritesSQLite(t *testing.T) {
	ctx := context.Background()
	url := "sqlite:" + filepath.Join(t.TempDir(), "kinflow.db")
	s, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if !s.SeesAllWrites() {
		t.Fatal("alone on the file, the store does not count itself alone")
	}

	other, err := s.OpenAnother(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.SeesAllWrites() || other.SeesAllWrites() {
		t.Fatal("two stores of one process on one file: one counts itself alone")
	}
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	if !s.SeesAllWrites() {
		t.Fatal("the second store closed: the first is alone again")
	}

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holdStoreEnv+"="+url)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "open\n" {
		_ = cmd.Process.Kill()
		t.Fatalf("helper process: %q %v", line, err)
	}
	if s.SeesAllWrites() {
		_ = cmd.Process.Kill()
		t.Fatal("another process has the file open: the store counts itself alone")
	}
	// Killed, it closes nothing itself: the kernel drops its lock.
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if !s.SeesAllWrites() {
		t.Fatal("the other process is gone: the store is alone again")
	}
}

// TestSeesAllWritesPostgres: on Postgres, every write is heard of while the
// listener is connected, and only then.
func TestSeesAllWritesPostgres(t *testing.T) {
	s := testenv.OpenStore(t, store.Postgres)
	if s.SeesAllWrites() {
		t.Fatal("no listener yet: complete")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.ListenJobChanges(ctx, slog.New(slog.NewTextHandler(io.Discard, nil))); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for !s.SeesAllWrites() {
		if time.Now().After(deadline) {
			cancel()
			t.Fatal("the listener connected but the feed is not complete")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if s.SeesAllWrites() {
		t.Fatal("the listener stopped: still complete")
	}
}
