#!/usr/bin/env bash
# Installs and starts what the test suite needs on a fresh Debian machine:
# PostgreSQL (started if stopped, installed if absent), MMseqs2, Python's
# numpy, torch, RDKit and Open Babel from Debian (for interop tests and the
# RDKit helper, which reads and writes InChI through Open Babel), the step
# programs' venvs (scripts/steps-venv.sh: PyPI torch, fair-esm, transformers,
# ESM C's esm), Chromium
# (browser test of the web page), and the OpenAPI linter from the npm
# registry. Idempotent: a second run takes seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

apt_updated=0
apt_install() {
  if [ "$apt_updated" = 0 ]; then as_root apt-get update -qq; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "$@" >/dev/null
}

# PostgreSQL on 127.0.0.1:5432.
if ! command -v pg_lsclusters >/dev/null 2>&1; then
  echo "test-deps: installing PostgreSQL"
  apt_install postgresql
fi
if ! pg_isready -q -h 127.0.0.1 -p 5432; then
  ver=$(ls /etc/postgresql | sort -V | tail -1)
  echo "test-deps: starting PostgreSQL $ver"
  as_root pg_ctlcluster --skip-systemctl-redirect "$ver" main start || as_root pg_ctlcluster "$ver" main start
  for _ in $(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done
fi
pg_isready -h 127.0.0.1 -p 5432
# Tests connect as postgres over TCP without a password (trust, as on CI
# machines); make sure that holds on a freshly installed cluster.
if ! psql "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable" -Atc 'select 1' >/dev/null 2>&1; then
  hba=$(as_root find /etc/postgresql -name pg_hba.conf | head -1)
  echo "test-deps: allowing trust auth for local TCP in $hba"
  as_root sed -i -E 's/^(host\s+all\s+all\s+(127\.0\.0\.1\/32|::1\/128)\s+)\S+/\1trust/' "$hba"
  ver=$(ls /etc/postgresql | sort -V | tail -1)
  as_root pg_ctlcluster --skip-systemctl-redirect "$ver" main reload || true
fi

# Python packages from Debian, used through /usr/bin/python3.
need=()
/usr/bin/python3 -c 'import numpy' 2>/dev/null || need+=(python3-numpy)
/usr/bin/python3 -c 'import torch' 2>/dev/null || need+=(python3-torch)
/usr/bin/python3 -c 'import rdkit' 2>/dev/null || need+=(python3-rdkit)
/usr/bin/python3 -c 'from openbabel import pybel' 2>/dev/null || need+=(python3-openbabel)
/usr/bin/python3 -c 'import ensurepip, venv' 2>/dev/null || need+=(python3-venv)
if [ ${#need[@]} -gt 0 ]; then
  echo "test-deps: installing ${need[*]}"
  apt_install "${need[@]}"
fi

# MMseqs2 for the similarity analysis (internal/similarity, activities,
# api): the tests search generated FASTA files with the real program.
if ! command -v mmseqs >/dev/null 2>&1; then
  echo "test-deps: installing MMseqs2"
  apt_install mmseqs2
fi

# The step programs' venvs (.venv-torch/: PyPI's torch, shared by .venv-steps/:
# fair-esm, transformers, pytest, ruff, and .venv-esmc/: EvolutionaryScale's esm),
# for `pytest steps` and the Go tests that run the step programs.
bash scripts/steps-venv.sh

# The Python client's venv (.venv-client/: clients/python with pytest, mypy,
# ruff), for its tests in `make test` and its checks in `make lint`.
bash scripts/client-venv.sh

# Headless Chromium for the browser test of the web page (internal/e2e).
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
  echo "test-deps: installing Chromium"
  apt_install chromium
fi

# The OpenAPI linter (npm, pinned by tools/openapi/package-lock.json).
if ! command -v npm >/dev/null 2>&1; then
  echo "test-deps: installing Node.js and npm"
  apt_install nodejs npm
fi
if [ -f tools/openapi/package-lock.json ] && [ ! -x tools/openapi/node_modules/.bin/redocly ]; then
  echo "test-deps: installing the OpenAPI linter"
  (cd tools/openapi && npm ci --no-audit --no-fund --loglevel=error)
fi
echo "test-deps: ready"
