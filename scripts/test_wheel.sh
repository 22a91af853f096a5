#!/usr/bin/env bash
# Builds ember's wheel as a user would (pip wheel), checks that it pins the torch it was built
# against (torch==X.Y.*), installs it in a fresh virtual environment (pip resolves torch there),
# and compiles a function with it. About a minute on 2 cores after a build (.ci/run runs it).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
"$PY" -m pip wheel -q --no-build-isolation --no-deps -w "$W/dist" .
whl=$(ls "$W"/dist/ember-*.whl)
minor=$("$PY" -c 'import torch; print(".".join(torch.__version__.split("+")[0].split(".")[:2]))')
pin=$(unzip -p "$whl" '*.dist-info/METADATA' | grep '^Requires-Dist: torch')
[ "$pin" = "Requires-Dist: torch==$minor.*" ] || { echo "wheel pins '$pin', expected torch==$minor.*"; exit 1; }
"$PY" -m venv "$W/venv"
if ! "$W/venv/bin/python" -m pip install -q "$whl" >"$W/pip.log" 2>&1; then
  cat "$W/pip.log"
  exit 1
fi
cd "$W"  # not the source tree: the wheel's ember, not the checkout's
"$W/venv/bin/python" - <<'PY'
import torch
import ember

assert ember.__file__.startswith(__import__("sys").prefix), ember.__file__
f = ember.compile(lambda x: (x.sin() * 2).relu())
x = torch.randn(64)
torch.testing.assert_close(f(x), (x.sin() * 2).relu())
assert ember.capture.records()[-1]["kernels"] >= 1
print(f"wheel ok: {ember.__file__} with torch {torch.__version__}")
PY
