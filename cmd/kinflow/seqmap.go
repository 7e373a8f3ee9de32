package main

import (
	"context"
	"fmt"
	"io"
)

// runSeqmap is `kinflow seqmap import FILE`: take over a reference
// deployment's seqmap.sqlite3, keeping every id it holds.
func runSeqmap(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "import" {
		fmt.Fprintln(stderr, "usage: kinflow seqmap import FILE   (a reference seqmap.sqlite3)")
		return usageError{"want: seqmap import FILE"}
	}
	fs := newFlags("seqmap import", stderr)
	file, err := oneArg(fs, args[1:], "FILE")
	if err != nil {
		return err
	}
	st, err := storeFromEnv(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	res, err := st.ImportSeqmap(ctx, file)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%d rows read, %d imported, %d already present\n", res.Rows, res.Imported, res.AlreadyPresent)
	return nil
}
