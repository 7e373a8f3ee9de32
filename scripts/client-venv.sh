#!/usr/bin/env bash
# Creates .venv-client/, the Python environment of the official client
# (clients/python): the package installed editable with its test extra (pytest,
# mypy, ruff, pandas-stubs, types-tqdm; matplotlib and ipywidgets for the plot
# and notebook extras; nbclient, nbformat and ipykernel to run the new user's
# notebook headless), pinned by clients/python/constraints.txt.
# Idempotent: it reinstalls only when pyproject.toml or the constraints changed
# (a stamp file records both).
set -euo pipefail
cd "$(dirname "$0")/.."

venv=.venv-client
pkg=clients/python
py=/usr/bin/python3
stamp="$venv/.kinflow-stamp"

want=$(cat "$pkg/pyproject.toml" "$pkg/constraints.txt" | sha256sum | cut -d' ' -f1)
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "client-venv: $venv is up to date"
  exit 0
fi
echo "client-venv: creating $venv and installing $pkg[test]"
start=$(date +%s)
"$py" -m venv "$venv"
"$venv/bin/python" -m pip install --disable-pip-version-check --no-input -q \
  -c "$pkg/constraints.txt" -e "$pkg[test]"
"$venv/bin/python" -c 'import kinflow_client, pandas, httpx, tqdm, tenacity, pytest, matplotlib, ipywidgets, nbclient, nbformat, ipykernel'
echo "$want" > "$stamp"
echo "client-venv: ready in $(( $(date +%s) - start ))s"
