#!/usr/bin/env bash
# On the GPU machine (no network): build ember against its torch with ninja, then run the demo and
# the Python tests (the CUDA tests in tests/python/gpu included). Writes logs under $OUT if set.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp}
python3 -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.cuda.is_available())'
# The image's default compiler wrapper (/opt/gcc) links with -Bsymbolic, which breaks libstdc++
# streams inside _C (a crash in the first std::ostringstream); the system g++ does not.
[ -x /usr/bin/g++ ] && export CXX=/usr/bin/g++ CC=/usr/bin/gcc
rm -rf build
t0=$(date +%s)
python3 -m pip install -q --no-build-isolation --no-deps -e . >"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
(cd /tmp && python3 -m ember)
python3 -m pytest tests/python -q -p no:cacheprovider --ignore=tests/python/bench "$@" 2>&1 | tee "$OUT/pytest.log" | tail -25
