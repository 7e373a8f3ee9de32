package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/kinflow/kinflow/internal/mediaroot"
)

const mediaUsage = `usage: kinflow media show
       kinflow media init

On the configured media root (KINFLOW_MEDIA_ROOT). show prints the root's
identity marker (` + mediaroot.MarkerName + `: its id and when it was made), or
why there is none (exit 1 when the root is not usable); it writes nothing. init writes the
marker into an existing root that has none: once, for a root that holds
data written by a kinflow without markers (every process refuses to write
into such a root, and /health/ says "media": "unmarked", until then). A
fresh root (no jobs/, sequence_info/ or gpu_jobs/ yet) is marked by the
first process that starts on it; init refuses a root already marked and
creates no missing one. Run it on the real root only, never on a folder
that stands in for it while it is away.`

// runMedia is `kinflow media show|init`: the media root's identity marker
// (internal/mediaroot).
func runMedia(_ context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintln(stdout, mediaUsage)
		return nil
	}
	sub := args[0]
	fs := newFlags("media "+sub, stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, mediaUsage) }
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	cfg, err := loadConfig()
	if err != nil {
		return err
	}
	switch sub {
	case "show":
		return mediaShow(cfg.MediaRoot, stdout)
	case "init":
		m, err := mediaroot.Init(cfg.MediaRoot)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "media root %s marked: id %s, created %s\n", cfg.MediaRoot, m.ID, m.Created.Format(time.RFC3339))
		return nil
	default:
		return usageError{fmt.Sprintf("unknown media subcommand %q (want show or init)", sub)}
	}
}

// mediaShow prints the root's marker, or why there is none (an error when
// the root is not usable). It writes nothing.
func mediaShow(path string, stdout io.Writer) error {
	m, err := mediaroot.ReadMarker(path)
	switch {
	case err == nil:
		fmt.Fprintf(stdout, "media root %s: id %s, created %s\n", path, m.ID, m.Created.Format(time.RFC3339))
		return nil
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("media root %s: %w", path, err)
	}
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return fmt.Errorf("media root %s: %w", path, err)
	case !fi.IsDir():
		return fmt.Errorf("media root %s is not a folder", path)
	case mediaroot.HoldsData(path):
		return fmt.Errorf("media root %s holds kinflow data but no identity marker: if it is the real root, run `kinflow media init`", path)
	}
	fmt.Fprintf(stdout, "media root %s: fresh, no marker yet (the first process that starts on it writes one)\n", path)
	return nil
}
