#!/usr/bin/env bash
# Builds ember._capture_core (torch-free: the frame hook and the bytecode layer) for one CPython
# and runs tests/python/capture_core with it.
#
#   scripts/test_capture_core.sh PYTHON [test args...]
#
# PYTHON needs nanobind (`PYTHON -m pip install nanobind`); torch is not needed. The build lives
# in build/capture-core-3.<minor>. Tests run with pytest when PYTHON has it (test args go to
# pytest), else with `python -m unittest discover` (test args go to unittest). pytest runs with
# --confcutdir tests/python/capture_core so that tests/python/conftest.py (it imports torch) is
# not loaded.
set -euo pipefail

if [[ $# -lt 1 ]]; then
  echo "usage: $0 PYTHON [test args...]" >&2
  exit 2
fi
PY=$1
shift
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MINOR=$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
BUILD="$ROOT/build/capture-core-$MINOR"

cmake -S "$ROOT" -B "$BUILD" -G Ninja \
  -DEMBER_CAPTURE_CORE_ONLY=ON -DEMBER_BUILD_PYTHON=OFF \
  -DPython_EXECUTABLE="$(command -v "$PY")" >/dev/null
cmake --build "$BUILD" --target _capture_core

TESTS="$ROOT/tests/python/capture_core"
export PYTHONPATH="$BUILD${PYTHONPATH:+:$PYTHONPATH}"
cd "$TESTS"
if "$PY" -c 'import pytest' 2>/dev/null; then
  exec "$PY" -m pytest -q -p no:cacheprovider --rootdir "$TESTS" --confcutdir "$TESTS" "$@" "$TESTS"
else
  exec "$PY" -m unittest discover -s "$TESTS" -t "$TESTS" "$@"
fi
