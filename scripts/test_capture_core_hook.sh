#!/usr/bin/env bash
# Builds ember._capture_core (no torch) for one interpreter and runs the frame-hook tests with
# unittest. Usage: scripts/test_capture_core_hook.sh /path/to/python3.X
set -euo pipefail
PY="${1:?usage: $0 PYTHON}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
MINOR="$("$PY" -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')"
BUILD="$ROOT/build/capture-core-hook-$MINOR"
"$PY" -c 'import nanobind' 2>/dev/null || "$PY" -m pip install -q nanobind
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DEMBER_CAPTURE_CORE_ONLY=ON -DEMBER_BUILD_PYTHON=OFF \
  -DPython_EXECUTABLE="$PY" -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C "$BUILD" _capture_core
cd "$ROOT"
PYTHONPATH="$BUILD${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m unittest discover -s tests/python/capture_core \
  -p 'test_frame_hook*.py' "${@:2}"
