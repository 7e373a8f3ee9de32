package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/kinflow/kinflow/internal/fairness"
	"github.com/kinflow/kinflow/internal/store"
)

// keyAdminCommands are the operator subcommands of `kinflow key`: they work
// on the database (KINFLOW_DATABASE_URL), not through the API.
var keyAdminCommands = map[string]bool{"limit": true, "weight": true, "usage": true, "block": true, "unblock": true}

// runKeyAdmin is `kinflow key limit KEY N|default`, `kinflow key weight
// KEY W|default`, `kinflow key usage` and `kinflow key block|unblock KEY`,
// where KEY is a full key or an active key's suffix.
func runKeyAdmin(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("key "+args[0], stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: kinflow key limit KEY N|default   set a key's daily prediction limit")
		fmt.Fprintln(stderr, "       kinflow key weight KEY W|default  set a key's share of the queues (1: the default; 2: served about twice as often)")
		fmt.Fprintln(stderr, "       kinflow key usage                 every key's unfinished jobs and rows, by class")
		fmt.Fprintln(stderr, "       kinflow key block|unblock KEY      refuse (or allow again) the key's owner address")
		fmt.Fprintln(stderr, "  KEY is a full key (ak_…) or an active key's 6-character suffix. Operator commands:")
		fmt.Fprintln(stderr, "  they change the database of KINFLOW_DATABASE_URL directly.")
	}
	pos, err := parseWithPositionals(fs, args[1:])
	if err != nil {
		return err
	}
	want := 1
	switch args[0] {
	case "limit", "weight":
		want = 2
	case "usage":
		want = 0
	}
	if len(pos) != want {
		fs.Usage()
		return usageError{fmt.Sprintf("key %s wants %d argument(s)", args[0], want)}
	}
	var limit *int
	if args[0] == "limit" && pos[1] != "default" {
		n, err := strconv.Atoi(pos[1])
		if err != nil || n < 0 {
			return usageError{"the limit is a whole number of predictions per UTC day, 0 or more, or 'default'"}
		}
		limit = &n
	}
	var weight *float64
	if args[0] == "weight" && pos[1] != "default" {
		w, err := fairness.ParseWeight(pos[1])
		if err != nil {
			return usageError{err.Error()}
		}
		weight = &w
	}
	st, err := storeFromEnv(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	if args[0] == "usage" {
		return printKeyUsage(ctx, st, stdout)
	}
	k, err := st.FindKey(ctx, pos[0])
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("no key matches %q", pos[0])
	}
	if err != nil {
		return err
	}
	name := fmt.Sprintf("key …%s (id %d, address %s)", k.KeySuffix, k.ID, k.IPAddress)
	switch args[0] {
	case "limit":
		if err := st.SetKeyLimit(ctx, k.ID, limit); err != nil {
			return err
		}
		if limit == nil {
			fmt.Fprintf(stdout, "%s: daily limit back to the default\n", name)
		} else {
			fmt.Fprintf(stdout, "%s: daily limit %d\n", name, *limit)
		}
	case "weight":
		if err := st.SetKeyWeight(ctx, k.ID, weight); err != nil {
			return err
		}
		if weight == nil {
			fmt.Fprintf(stdout, "%s: weight back to the default (%g); jobs started from now on use it\n", name, fairness.DefaultWeight)
		} else {
			fmt.Fprintf(stdout, "%s: weight %g; jobs started from now on use it\n", name, *weight)
		}
	case "block", "unblock":
		if err := st.SetUserBlocked(ctx, k.IPAddress, args[0] == "block", time.Now()); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s: owner address %sed\n", name, args[0])
	}
	return nil
}

// printKeyUsage prints every key with unfinished jobs: its fairness key,
// weight, and its jobs and rows waiting (Pending) and running
// (Processing), by class, largest first.
func printKeyUsage(ctx context.Context, st *store.Store, w io.Writer) error {
	work, err := st.UnfinishedWorkByKey(ctx)
	if err != nil {
		return err
	}
	if len(work) == 0 {
		fmt.Fprintln(w, "no unfinished jobs")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tWEIGHT\tCLASS\tWAITING JOBS\tWAITING ROWS\tRUNNING JOBS\tRUNNING ROWS")
	type line struct {
		key   int64
		class string
	}
	sums := map[line]*[4]int64{}
	var order []line
	for _, kw := range work {
		l := line{kw.KeyID, kw.Priority}
		if l.class == "" {
			l.class = "(before classes)"
		}
		s, ok := sums[l]
		if !ok {
			s = &[4]int64{}
			sums[l] = s
			order = append(order, l)
		}
		if kw.Status == store.JobPending {
			s[0] += kw.Jobs
			s[1] += kw.Rows
		} else {
			s[2] += kw.Jobs
			s[3] += kw.Rows
		}
	}
	ids := make([]int64, 0, len(order))
	for _, l := range order {
		ids = append(ids, l.key)
	}
	weights, err := st.KeyWeights(ctx, ids)
	if err != nil {
		return err
	}
	for _, l := range order {
		weight, ok := weights[l.key]
		if !ok {
			weight = fairness.DefaultWeight
		}
		s := sums[l]
		fmt.Fprintf(tw, "%s\t%g\t%s\t%d\t%d\t%d\t%d\n", fairness.Key(l.key), weight, l.class, s[0], s[1], s[2], s[3])
	}
	return tw.Flush()
}
