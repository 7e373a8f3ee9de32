#!/usr/bin/env bash
# wrk on GET /api/v1/status/{id}/ with a valid key, on SQLite and on Postgres,
# beside a bare Gin handler in the same run (docs/BENCHMARKS.md).
# Needs wrk (apt-get install wrk), bin/temporal, and Postgres on 127.0.0.1:5432.
set -euo pipefail
cd "$(dirname "$0")/.."
DUR=${DUR:-15s}
CONN=${CONN:-32}
go build -o bin/kinflow ./cmd/kinflow
go build -o bin/baregin ./tools/baregin
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

run_wrk() { # name url [header]
  echo "== $1"
  if [ -n "${3:-}" ]; then wrk -t2 -c"$CONN" -d"$DUR" --latency -H "$3" "$2"; else wrk -t2 -c"$CONN" -d"$DUR" --latency "$2"; fi \
    | grep -E 'Requests/sec|^ +50%|^ +99%|Non-2xx'
}

./bin/baregin -listen 127.0.0.1:8099 & sleep 1
run_wrk bare-gin http://127.0.0.1:8099/status/abc/

psql -q "postgres://postgres@127.0.0.1:5432/postgres" -c "DROP DATABASE IF EXISTS kinflow_wrk" -c "CREATE DATABASE kinflow_wrk"
for db in "sqlite:$work/kinflow.db" "postgres://postgres@127.0.0.1:5432/kinflow_wrk?sslmode=disable"; do
  # One key reads as fast as wrk can: the per-key read rate is off, so the
  # figure is the status route's own throughput.
  KINFLOW_STATUS_READS_PER_SECOND=0 \
  KINFLOW_DATABASE_URL=$db KINFLOW_MEDIA_ROOT=$work/media KINFLOW_API_LISTEN=127.0.0.1:8098 \
    KINFLOW_GPU_LISTEN=127.0.0.1:8097 KINFLOW_TEMPORAL_ADDRESS=127.0.0.1:7299 LOG_LEVEL=warn \
    ./bin/kinflow dev --temporal-cli bin/temporal --data-dir "$work/.data" --temporal-ui-port 8296 >/dev/null 2>"$work/dev.log" &
  pid=$!
  for _ in $(seq 1 100); do curl -sf http://127.0.0.1:8098/api/v1/health/ >/dev/null && break; sleep 0.2; done
  key=$(curl -s -X POST http://127.0.0.1:8098/api/api-key/generate/ | sed -E 's/.*"key": ?"([^"]+)".*/\1/')
  job=$(curl -s -H "Authorization: Bearer $key" -F file=@docs/example.csv -F 'targets=["kcat"]' -F 'methods={"kcat":"B"}' \
        http://127.0.0.1:8098/api/v1/submit/ | sed -E 's/.*"jobId": ?"([^"]+)".*/\1/')
  sleep 3
  run_wrk "status on ${db%%:*}" "http://127.0.0.1:8098/api/v1/status/$job/" "Authorization: Bearer $key"
  kill -INT $pid; wait $pid 2>/dev/null || true
done
