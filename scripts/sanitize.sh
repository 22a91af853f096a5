#!/usr/bin/env bash
# The tests under AddressSanitizer and UndefinedBehaviorSanitizer, in one build (-fsanitize=
# address,undefined, no recovery: a report fails the run).
#
#   scripts/sanitize.sh [cpp] [python [PYTEST_ARGS...]]     (default: both, the Python subset below)
#
#   cpp     the C++ unit tests (build/asan-cpp, ctest)
#   python  ember's extensions built sanitized (build/asan-py) and loaded in place of the
#           installed ones, with the ASan runtime preloaded into an unsanitized CPython and
#           torch (leak checks off: CPython and torch keep memory until exit by design). The
#           default subset is the capture, tracer and fuzz tests; pass pytest paths to choose.
#
# Generated kernels (compiled at run time by the host compiler) are not instrumented.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g1"
what=${1:-all}
[ $# -gt 0 ] && shift
gen=""
command -v ninja >/dev/null 2>&1 && gen="-G Ninja"

if [ "$what" = cpp ] || [ "$what" = all ]; then
  cmake -S . -B build/asan-cpp $gen -DEMBER_BUILD_PYTHON=OFF -DEMBER_BUILD_TESTS=ON \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS="$FLAGS" -DCMAKE_C_FLAGS="$FLAGS" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
  cmake --build build/asan-cpp -j "$(nproc)"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build/asan-cpp --output-on-failure -j "$(nproc)"
fi

if [ "$what" = python ] || [ "$what" = all ]; then
  cmake -S . -B build/asan-py $gen -DEMBER_BUILD_PYTHON=ON -DEMBER_BUILD_TESTS=OFF \
    -DPython_EXECUTABLE="$(command -v "$PY")" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS="$FLAGS" -DCMAKE_C_FLAGS="$FLAGS" \
    -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" \
    -DCMAKE_MODULE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
  cmake --build build/asan-py -j "$(nproc)"
  # A sitecustomize that loads ember's two extensions from build/asan-py.
  site=build/asan-py/site
  mkdir -p "$site"
  cat >"$site/sitecustomize.py" <<PYEOF
import importlib.abc, importlib.machinery, importlib.util, os, sys, sysconfig
_B = os.path.abspath("build/asan-py")
_S = sysconfig.get_config_var("EXT_SUFFIX")
class _F(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name in ("ember._C", "ember._capture_core"):
            f = os.path.join(_B, name.split(".")[1] + _S)
            return importlib.util.spec_from_file_location(
                name, f, loader=importlib.machinery.ExtensionFileLoader(name, f))
        return None
sys.meta_path.insert(0, _F())
PYEOF
  asan=$(${CXX:-c++} -print-file-name=libasan.so)
  ubsan=$(${CXX:-c++} -print-file-name=libubsan.so)
  [ $# -gt 0 ] || set -- tests/python/capture tests/python/tracer tests/python/fuzz
  PYTHONPATH="$PWD/$site${PYTHONPATH:+:$PYTHONPATH}" LD_PRELOAD="$asan $ubsan" \
    ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:verify_asan_link_order=0:detect_odr_violation=0 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$PY" -m pytest -q -p no:cacheprovider "$@"
fi
