#!/usr/bin/env bash
# One-command setup for a fresh machine: system packages, torch (CPU), build dependencies, ember.
# Keeps an installed torch >= 2.11 (the GPU machine has its own CUDA build and no network).
set -euo pipefail
cd "$(dirname "$0")/.."

if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  need=""
  for pkg in cmake ninja-build g++ libgtest-dev ccache clang-format; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need="$need $pkg"
  done
  if [ -n "$need" ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need >/dev/null
  fi
  # Headless Chromium renders the compile report in its test (skipped where it is absent).
  if ! command -v chromium >/dev/null 2>&1; then
    { [ -n "$need" ] || apt-get update -qq; } &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1 ||
      echo "chromium not installed: the compile report's browser test will be skipped"
  fi
fi

PY=${PYTHON:-python3}
if ! "$PY" -c "import torch, sys; v = tuple(int(p) for p in torch.__version__.split('+')[0].split('.')[:2]); sys.exit(v < (2, 11))" 2>/dev/null; then
  "$PY" -m pip install -q torch==2.13.0
fi
"$PY" -m pip install -q nanobind scikit-build-core pytest expecttest "transformers==5.17.0" \
  "triton==3.6.0"
"$PY" -m pip install -q --no-build-isolation -e .
# The torch-free capture core is also tested on pyenv's 3.12 and 3.13 (scripts/test.sh).
for v in 3.12 3.13; do
  other=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/$v.*/bin/python$v 2>/dev/null | tail -1 || true)
  [ -n "$other" ] && "$other" -m pip install -q nanobind || true
done
echo "ember installed: $("$PY" -c 'import ember, torch; print(ember.__version__, "with torch", torch.__version__)')"
