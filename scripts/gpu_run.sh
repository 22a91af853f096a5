#!/usr/bin/env bash
# On the GPU machine (no network): build ember against its torch, then run the named steps in
# order. Everything lands in $OUT/run (packed into $OUT/run.tgz after each step, since the device
# tool brings back a few files only).
#
#   scripts/gpu_run.sh kernels graphs "suite:<bench_shards args>" tests
#
#   kernels   scripts/bench_triton_kernels.py, with and without persistent rows
#   graphs    scripts/bench_triton_graphs.py, with and without persistent rows
#   suite:A   scripts/bench_shards.py A --out-dir $OUT/run (A names --name, --gpus, the harness
#             options)
#   tests     the Python tests (pytest -n 8)
#   pytest:A  pytest A (paths and options)
#   profile:A scripts/profile_model.py A
#   verify:A  scripts/verify_model.py A (EMBER_VERIFY_KERNELS=1: kernels against their ATen ops)
#   py:A      python3 A (a script and its arguments), cut off after PY_TIMEOUT seconds (default:
#             the budget left)
#   zoo:A     scripts/zoo_sweep.py A (A names --family, --json @R/NAME.json, --jobs, ...), cut off
#             after ZOO_TIMEOUT seconds (default: the budget left); its rows are kept as they come
# In every step's arguments @R stands for the results folder and @LEFT for the seconds left until
# GPU_RUN_BUDGET (default 570) seconds after the script's start, so a last suite step can fill the call.
# pytest steps are cut off after PYTEST_TIMEOUT seconds (default 600).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
R=$OUT/run
mkdir -p "$R"
export PYTHONUNBUFFERED=1
python3 -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "gpus", torch.cuda.device_count())'
# The image's default compiler wrapper links with -Bsymbolic, which breaks libstdc++ streams in _C.
[ -x /usr/bin/g++ ] && export CXX=/usr/bin/g++ CC=/usr/bin/gcc
t0=$(date +%s)
END_AT=$(( t0 + ${GPU_RUN_BUDGET:-570} ))
# The build folder is kept: a warm machine's second call rebuilds only what changed.
python3 -m pip install -q --no-build-isolation --no-deps -e . >"$R/build.log" 2>&1 || { tail -40 "$R/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"

for step in "$@"; do
  t=$(date +%s)
  step=${step//@R/$R}
  step=${step//@LEFT/$(( END_AT - t ))}
  case "$step" in
    kernels)
      python3 scripts/bench_triton_kernels.py --json "$R/kernels.json" 2>&1 | tee "$R/kernels.log" | tail -30
      EMBER_TRITON_PERSISTENT=0 python3 scripts/bench_triton_kernels.py --json "$R/kernels_loop.json" \
        2>&1 | tee "$R/kernels_loop.log" | tail -30 ;;
    graphs)
      python3 scripts/bench_triton_graphs.py --json "$R/graphs.json" 2>&1 | tee "$R/graphs.log" | tail -30
      EMBER_TRITON_PERSISTENT=0 python3 scripts/bench_triton_graphs.py --json "$R/graphs_loop.json" \
        2>&1 | tee "$R/graphs_loop.log" | tail -30 ;;
    suite:*)
      args=${step#suite:}
      # Words split, not globbed: bench_shards expands --skip-done's patterns itself.
      set -f
      # shellcheck disable=SC2086
      python3 scripts/bench_shards.py --out-dir "$R" ${args} 2>&1 | tee -a "$R/suite.log" | tail -60
      set +f ;;
    tests)
      python3 -m pytest tests/python -q -p no:cacheprovider --ignore=tests/python/bench -n 8 2>&1 \
        | tee "$R/pytest.log" | tail -25 ;;
    pytest:*)
      # shellcheck disable=SC2086
      timeout "${PYTEST_TIMEOUT:-600}" python3 -m pytest -q -p no:cacheprovider ${step#pytest:} 2>&1 | tee -a "$R/pytest.log" | tail -15 ;;
    profile:*)
      # shellcheck disable=SC2086
      python3 scripts/profile_model.py ${step#profile:} 2>&1 | grep -v USDT | tee -a "$R/profile.log" \
        | tail -80 ;;
    py:*)
      # shellcheck disable=SC2086
      timeout "${PY_TIMEOUT:-$(( END_AT - t ))}" python3 ${step#py:} 2>&1 | tee -a "$R/py.log" | tail -40 ;;
    zoo:*)
      # shellcheck disable=SC2086
      timeout "${ZOO_TIMEOUT:-$(( END_AT - t ))}" python3 scripts/zoo_sweep.py ${step#zoo:} 2>&1 \
        | tee -a "$R/zoo.log" | tail -5 ;;
    verify:*)
      # shellcheck disable=SC2086
      python3 scripts/verify_model.py ${step#verify:} 2>&1 | tee -a "$R/verify.log" | cut -c1-300 \
        | grep -v "^    \|^$\|^import\|^from\|^@triton" | tail -60 ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac
  echo "step $step: $(( $(date +%s) - t )) s"
  # Packed after every step: a call cut off by its time limit still brings back what finished.
  tar -C "$OUT" -czf "$OUT/run.tgz.tmp" run && mv "$OUT/run.tgz.tmp" "$OUT/run.tgz"
done
rm -rf "$R"
