#!/usr/bin/env bash
# Creates the Python environments of the step programs (steps/) and their tests:
#
#   .venv-torch/  PyPI's torch + numpy (steps/requirements-torch.txt), the build GPU
#                 hosts run; shared by the two below through a .pth file, so its
#                 ~5 GB (torch brings its CUDA wheels even for CPU use) is installed once;
#   .venv-steps/  fair-esm, transformers, pytest, ruff (steps/requirements.txt);
#   .venv-esmc/   EvolutionaryScale's `esm` for ESM C (steps/requirements-esmc.txt,
#                 installed --no-deps: the file lists every package, see its header).
#
# fair-esm and esm both install a top-level module `esm`, hence two venvs. All three
# start from Debian's /usr/bin/python3 without its site packages (Debian's torch 1.13
# stays for the interop tests that use /usr/bin/python3). Idempotent: a venv is
# remade only when its requirements (or torch's) changed; a stamp file records them.
set -euo pipefail
cd "$(dirname "$0")/.."

py=/usr/bin/python3
pip_flags=(--disable-pip-version-check --no-input -q)

stamp_of() { cat "$@" | sha256sum | cut -d' ' -f1; }

# fresh VENV STAMP: true when VENV exists with that stamp.
fresh() { [ -x "$1/bin/python" ] && [ -f "$1/.kinflow-stamp" ] && [ "$(cat "$1/.kinflow-stamp")" = "$2" ]; }

site_of() { "$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }

torch_req=steps/requirements-torch.txt
torch_stamp=$(stamp_of "$torch_req")
if fresh .venv-torch "$torch_stamp"; then
  echo "steps-venv: .venv-torch is up to date"
else
  echo "steps-venv: creating .venv-torch ($torch_req: PyPI torch with its CUDA wheels)"
  start=$(date +%s)
  rm -rf .venv-torch
  "$py" -m venv .venv-torch
  .venv-torch/bin/python -m pip install "${pip_flags[@]}" -r "$torch_req"
  .venv-torch/bin/python -c 'import torch, numpy; torch.ones(2) @ torch.ones(2)'
  echo "$torch_stamp" > .venv-torch/.kinflow-stamp
  echo "steps-venv: .venv-torch ready in $(( $(date +%s) - start ))s ($(du -sh .venv-torch | cut -f1))"
fi
torch_site=$(cd "$(site_of .venv-torch)" && pwd -P)

# make_venv VENV REQUIREMENTS CHECK [PIP FLAGS...]
make_venv() {
  local venv=$1 req=$2 check=$3
  shift 3
  local want
  want=$(stamp_of "$req" "$torch_req")
  if fresh "$venv" "$want"; then
    echo "steps-venv: $venv is up to date"
    return
  fi
  echo "steps-venv: creating $venv ($req over .venv-torch)"
  local start
  start=$(date +%s)
  rm -rf "$venv"
  "$py" -m venv "$venv"
  # torch and numpy come from .venv-torch; the venv's own packages come first.
  echo "$torch_site" > "$(site_of "$venv")/kinflow-torch.pth"
  "$venv/bin/python" -m pip install "${pip_flags[@]}" "$@" -r "$req"
  "$venv/bin/python" -c "$check"
  echo "$want" > "$venv/.kinflow-stamp"
  echo "steps-venv: $venv ready in $(( $(date +%s) - start ))s"
}

make_venv .venv-steps steps/requirements.txt \
  'import esm, transformers, sentencepiece, torch, numpy, pytest; assert hasattr(esm, "pretrained")'
make_venv .venv-esmc steps/requirements-esmc.txt \
  'import torch, pytest; from esm.models.esmc import ESMC; from esm.tokenization import get_esmc_model_tokenizers' \
  --no-deps
