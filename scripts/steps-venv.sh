#!/usr/bin/env bash
# Creates .venv-steps/, the Python environment of the step programs (steps/) and
# their tests: Debian's python3 with its system packages visible (python3-torch,
# python3-numpy from scripts/test-deps.sh) plus the pinned PyPI packages of
# steps/requirements.txt. Idempotent: it reinstalls only when the requirements or
# the system torch changed (a stamp file records both).
set -euo pipefail
cd "$(dirname "$0")/.."

venv=.venv-steps
req=steps/requirements.txt
py=/usr/bin/python3
stamp="$venv/.kinflow-stamp"

torch_ver=$("$py" -c 'import torch; print(torch.__version__)')
want=$( { sha256sum "$req"; echo "torch $torch_ver"; } | sha256sum | cut -d' ' -f1)
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "steps-venv: $venv is up to date (torch $torch_ver)"
  exit 0
fi
echo "steps-venv: creating $venv (system torch $torch_ver) and installing $req"
start=$(date +%s)
"$py" -m venv --system-site-packages "$venv"
"$venv/bin/python" -m pip install --disable-pip-version-check --no-input -q -r "$req"
"$venv/bin/python" -c 'import esm, transformers, sentencepiece, torch, numpy, pytest'
echo "$want" > "$stamp"
echo "steps-venv: ready in $(( $(date +%s) - start ))s"
