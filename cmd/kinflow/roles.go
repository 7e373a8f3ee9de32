package main

import (
	"context"
	"fmt"
	"io"

	"github.com/kinflow/kinflow/internal/config"
)

func runConfig(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("config", stderr)
	md := fs.Bool("markdown", false, "print the README's configuration table")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *md {
		fmt.Fprint(stdout, config.Markdown())
		return nil
	}
	for _, k := range config.Keys {
		fmt.Fprintf(stdout, "%s=%s\n", k.Name, k.Default)
	}
	for _, k := range config.HostKeys {
		if !k.Prefix {
			fmt.Fprintf(stdout, "%s=%s\n", k.Name, k.Default)
		}
	}
	return nil
}
