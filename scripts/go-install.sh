#!/usr/bin/env bash
# go-install.sh WHAT GOBIN PACKAGE@VERSION... — `go install` the pinned
# packages into GOBIN for the Makefile (bin/temporal, bin/temporal-server),
# saying first what is built and that the first time takes minutes, then a
# line every 30 s while it runs: `go install` itself prints nothing while it
# downloads and compiles, so a fresh machine's `make run` would otherwise
# look stuck for minutes.
set -euo pipefail

what=$1 gobin=$2
shift 2
echo "building $what (first time only: downloads and compiles from the Go module proxy, a few minutes)…"
# The ticker runs beside the build and goes with this script, however it
# ends (Ctrl-C reaches `go install` in the foreground as usual).
(
	trap 'kill "$s" 2>/dev/null; exit 0' TERM
	n=0
	while :; do
		sleep 30 &
		s=$!
		wait "$s"
		n=$((n + 30))
		echo "  still building $what ($((n / 60))m$((n % 60))s so far)…"
	done
) &
ticker=$!
trap 'kill "$ticker" 2>/dev/null' EXIT
start=$SECONDS
rc=0
GOBIN=$gobin "${GO:-go}" install "$@" || rc=$?
took="$(((SECONDS - start) / 60))m$(((SECONDS - start) % 60))s"
if [ "$rc" -ne 0 ]; then
	echo "building $what failed (go install exit $rc, after $took)" >&2
	exit "$rc"
fi
echo "built $what in $took"
