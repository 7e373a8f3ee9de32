#!/usr/bin/env bash
# Profile the production topology under its load test
# (TestLoadBurstOnProductionTopology: 200 3-row jobs, two of each role,
# Temporal server on Postgres): the Temporal server's Go profile (pprof,
# docker/temporal/config.yaml's PPROF_PORT), its persistence requests per job
# (PROMETHEUS_ENDPOINT), and every process's CPU share from a system-wide
# perf record (Postgres, the server, kinflow's roles). docs/BENCHMARKS.md,
# "The profile".
#
#   scripts/profile-topology.sh OUTDIR [SECONDS]   (SECONDS: profile window, default 15)
set -euo pipefail
out=${1:?usage: $0 OUTDIR [SECONDS]}
secs=${2:-15}
mkdir -p "$out"
pprof_port=${PPROF_PORT:-17936}
metrics=${PROMETHEUS_ENDPOINT:-127.0.0.1:17937}
export PPROF_PORT=$pprof_port PROMETHEUS_ENDPOINT=$metrics

ops() { # the server's Prometheus text: persistence requests and completed PredictionWorkflows
  curl -s "http://$metrics/metrics" | grep -E '^(visibility_)?persistence_requests\{|^workflow_success\{' || true
}

go test ./internal/e2e -run '^TestLoadBurstOnProductionTopology$' -count=1 -v >"$out/test.log" 2>&1 &
test_pid=$!
# The burst begins with the first PredictionWorkflow the server sees.
until [[ $(curl -s "http://$metrics/metrics" 2>/dev/null || true) == *PredictionWorkflow* ]]; do
  kill -0 "$test_pid" 2>/dev/null || { echo "test ended before the burst"; tail -20 "$out/test.log"; exit 1; }
  sleep 0.2
done
echo "burst started $(date -u +%T), load $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$out/summary.txt"
ops >"$out/ops-before.txt"
curl -s -o "$out/temporal-server.pprof" "http://127.0.0.1:$pprof_port/debug/pprof/profile?seconds=$secs" &
pprof_pid=$!
perf record -q -a -g -F 199 -o "$out/system.perf.data" -- sleep "$secs" 2>/dev/null
ops >"$out/ops-after.txt"
wait "$pprof_pid" || true
wait "$test_pid" && echo "test passed" >>"$out/summary.txt" || echo "test FAILED" >>"$out/summary.txt"
grep -E 'api-[0-9]:' "$out/test.log" >>"$out/summary.txt" || true
{
  echo; echo "CPU by process name over the ${secs}s window (system-wide perf, 199 Hz):"
  perf report -i "$out/system.perf.data" --sort comm --stdio -g none 2>/dev/null | grep '%' | grep -v '^#' | head -15
  echo; echo "Temporal server, top functions (cumulative):"
  go tool pprof -top -cum -nodecount=40 "$out/temporal-server.pprof" 2>/dev/null | tail -41
} >>"$out/summary.txt"
python3 - "$out" <<'PY' | tee -a "$out/summary.txt"
import re, sys
def read(path):
    ops, done = {}, 0.0
    for line in open(path):
        v = float(line.rsplit(" ", 1)[1])
        if line.startswith("workflow_success{"):
            if 'PredictionWorkflow' in line:
                done += v
            continue
        op = re.search(r'operation="([^"]*)"', line).group(1)
        if line.startswith("visibility_"):
            op = "visibility " + op
        ops[op] = ops.get(op, 0) + v
    return ops, done
b, bd = read(sys.argv[1] + "/ops-before.txt")
a, ad = read(sys.argv[1] + "/ops-after.txt")
jobs = ad - bd
print(f"\nPersistence requests per completed job over the window ({jobs:.0f} PredictionWorkflows completed):")
rows = sorted(((a[k] - b.get(k, 0)) / max(jobs, 1), k) for k in a)
print(f"  {sum(r[0] for r in rows):6.1f}  total")
for v, k in reversed(rows):
    if v > 0.005:
        print(f"  {v:6.2f}  {k}")
PY
