package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/kinflow/kinflow/internal/store"
)

// keyAdminCommands are the operator subcommands of `kinflow key`: they work
// on the database (KINFLOW_DATABASE_URL), not through the API.
var keyAdminCommands = map[string]bool{"limit": true, "block": true, "unblock": true}

// runKeyAdmin is `kinflow key limit KEY N|default` and `kinflow key
// block|unblock KEY`, where KEY is a full key or an active key's suffix.
func runKeyAdmin(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("key "+args[0], stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: kinflow key limit KEY N|default   set a key's daily prediction limit")
		fmt.Fprintln(stderr, "       kinflow key block|unblock KEY      refuse (or allow again) the key's owner address")
		fmt.Fprintln(stderr, "  KEY is a full key (ak_…) or an active key's 6-character suffix. Operator commands:")
		fmt.Fprintln(stderr, "  they change the database of KINFLOW_DATABASE_URL directly.")
	}
	pos, err := parseWithPositionals(fs, args[1:])
	if err != nil {
		return err
	}
	want := 1
	if args[0] == "limit" {
		want = 2
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
	st, err := storeFromEnv(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
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
	case "block", "unblock":
		if err := st.SetUserBlocked(ctx, k.IPAddress, args[0] == "block", time.Now()); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s: owner address %sed\n", name, args[0])
	}
	return nil
}
