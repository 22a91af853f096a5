#!/usr/bin/env bash
# Runs every test: the C++ unit tests (GoogleTest through ctest) and the Python suite (pytest).
# C++ tests are skipped with a message where GoogleTest is absent.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

if [ -f /usr/include/gtest/gtest.h ] || [ -n "${GTEST_ROOT:-}" ]; then
  gen=""
  command -v ninja >/dev/null 2>&1 && gen="-G Ninja"
  cmake -S . -B build/cpp $gen -DEMBER_BUILD_PYTHON=OFF -DEMBER_BUILD_TESTS=ON >/dev/null
  cmake --build build/cpp -j "$(nproc)"
  ctest --test-dir build/cpp --output-on-failure -j "$(nproc)"
else
  echo "GoogleTest not found: skipping the C++ unit tests (apt-get install libgtest-dev)"
fi

"$PY" -m pytest tests/python -q "$@"

# The differential tests, the capture corpus and the training tests a second time with every
# graph dynamic (dynamic=True: torch.compile's graphs get Dynamo's symbolic sizes, ember.compile's
# its own shape symbols; issue 35).
EMBER_TEST_DYNAMIC=1 EMBER_DYNAMIC=true "$PY" -m pytest tests/python/differential \
  tests/python/capture tests/python/training -q "$@"

# The torch-free capture core (frame hook, bytecode) on the other supported CPythons, where pyenv
# has them (their torch-free tests; tests/python/capture_core).
for v in 3.12 3.13; do
  other=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/$v.*/bin/python$v 2>/dev/null | tail -1 || true)
  if [ -n "$other" ] && "$other" -c 'import nanobind' 2>/dev/null; then
    echo "capture core on $("$other" -V)"
    scripts/test_capture_core.sh "$other" -q
  else
    echo "skipping the capture core tests on Python $v (not installed, or no nanobind)"
  fi
done
