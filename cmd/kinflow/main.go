// Command kinflow is the one binary of the service: server roles (api, worker,
// gpu-worker, dev), operator tools and the command-line client.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/kinflow/kinflow/internal/embedjob"
)

// command is one subcommand.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// commands lists every subcommand, in help order.
func commands() []command {
	return []command{
		{"api", "serve the public REST API", runAPI},
		{"worker", "run workflows and CPU activities on the CPU task queue (--check: check the method programs first)", runWorker},
		{"gpu-worker", "serve the GPU task queue and the GPU service HTTP API", runGPUWorker},
		{"dev", "run every role in one process on the embedded defaults", runDev},
		{"step-server", "step-server --synthetic: a resident step server writing synthetic artefacts (started by the GPU host)", runStepServer},
		{"migrate", "apply database migrations and exit", runMigrate},
		{"namespace", "create the Temporal namespace if absent and register JobId, Method, Stage (operator, idempotent)", runNamespace},
		{"config", "print the configuration keys (--markdown for the README table)", runConfig},
		{"seqid", "print seq_id<TAB>length per sequence of a FASTA or CSV file", runSeqID},
		{"seqmap", "seqmap import FILE: take over a reference seqmap.sqlite3, keeping its ids", runSeqmap},
		{"plan", "show the embedding plan of a method over a FASTA or CSV file", runPlan},
		{"cache", "cache status|verify|adopt|purge: the embedding cache's files and provenance (operator)", runCache},
		{"media", "media show|init: the media root's identity marker (operator)", runMedia},
		{"key", "key status|generate|revoke: this address's API key (client); key limit|weight|block|unblock KEY, key usage: operator", runKey},
		{"keys", "keys usage: every key's unfinished work, by class (operator; the same as key usage)", runKey},
		{"methods", "list the methods by target (client); methods check [KEY…]: run each configured method program on a few rows (operator)", runMethods},
		{"validate", "validate FILE: check a CSV's rows without submitting (client)", runValidate},
		{"submit", "submit FILE --target T --method M [--wait]: start a job (client)", runSubmit},
		{"status", "status JOB: a job's status and progress (client)", runStatus},
		{"result", "result JOB [-o FILE] [--json]: a completed job's result (client)", runResult},
		{"jobs", "jobs [--status S] [--limit N] [--all] [--json]: your own jobs, newest first (client)", runJobs},
	}
}

// usageError is a mistake in the command line: exit code 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout)
		return 0
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, args[1:], stdout, stderr)
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.As(err, new(usageError)):
			fmt.Fprintf(stderr, "kinflow %s: %v\n", c.name, err)
			return 2
		default:
			fmt.Fprintf(stderr, "kinflow %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "kinflow: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: kinflow <command> [flags]")
	fmt.Fprintln(w)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-12s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Configuration comes from the environment: `kinflow config` lists every key.")
}

// newFlags makes a FlagSet that reports errors instead of exiting.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("kinflow "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parseFlags parses args, mapping flag errors to usage errors.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err.Error()}
	}
	return nil
}

// oneArg parses args (flags may follow the argument) and returns the single
// positional argument; what names it in the usage error.
func oneArg(fs *flag.FlagSet, args []string, what string) (string, error) {
	pos, err := parseWithPositionals(fs, args)
	if err != nil {
		return "", err
	}
	if len(pos) != 1 {
		return "", usageError{"want exactly one " + what}
	}
	return pos[0], nil
}

// runStepServer is `kinflow step-server --synthetic`: the synthetic
// executor's resident step server. The GPU host starts it and talks to it over
// stdin and stdout (docs/gpu-host.md).
func runStepServer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if code := embedjob.StepServerMain(ctx, args, os.Stdin, stdout, stderr); code != 0 {
		if code == 2 {
			return usageError{"want --synthetic"}
		}
		return fmt.Errorf("step server exited %d", code)
	}
	return nil
}
