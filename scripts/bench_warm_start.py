"""Warm start: how long a second process takes to compile a model it compiled before, against the
first (cold caches), for ember.compile and for torch.compile (Inductor, with its FX graph cache
and AOTAutograd cache on, as by default).

Each (model, backend) runs in two fresh subprocesses sharing one cache root (EMBER_CACHE_DIR,
TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR under it, empty before the first): build the model
(the suite's small size), call it eagerly once, then time the compiled model's first call; the
compile time is that minus an eager call. Prints one table (model, backend, cold s, warm s,
warm/cold) and the geomeans.

    python scripts/bench_warm_start.py --models BertForMaskedLM,GPT2LMHeadModel,mlp --json out.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import sys, time, torch
from ember.bench import models as M
name, backend, mode = sys.argv[1], sys.argv[2], sys.argv[3]
torch.manual_seed(0)
wl = M.REGISTRY[name].build("small", mode, "cpu")
model = wl.model
def call(m):
    if mode == "training":
        M.reduce_to_scalar_loss(m(*wl.args, **wl.kwargs)).backward()
    else:
        with torch.no_grad():
            m(*wl.args, **wl.kwargs)
call(model)
t = time.perf_counter(); call(model); eager = time.perf_counter() - t
if backend == "ember":
    import ember
    compiled = ember.compile(model)
else:
    compiled = torch.compile(model)
t = time.perf_counter(); call(compiled); first = time.perf_counter() - t
print("WARM_START", max(first - eager, 0.0))
"""


def one(model: str, backend: str, mode: str, root: str, timeout: float) -> float | None:
    env = dict(os.environ, EMBER_CACHE_DIR=os.path.join(root, "ember"),
               TORCHINDUCTOR_CACHE_DIR=os.path.join(root, "inductor"),
               TRITON_CACHE_DIR=os.path.join(root, "triton"))
    r = subprocess.run([sys.executable, "-c", CHILD, model, backend, mode], env=env,
                       capture_output=True, text=True, timeout=timeout)
    for line in r.stdout.splitlines():
        if line.startswith("WARM_START "):
            return float(line.split()[1])
    print(f"{model} {backend}: failed: {r.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
    return None


def geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="mlp,nanogpt,tiny_resnet")
    p.add_argument("--backends", default="ember,inductor")
    p.add_argument("--mode", default="inference", choices=["inference", "training"])
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    rows = []
    for model in args.models.split(","):
        for backend in args.backends.split(","):
            with tempfile.TemporaryDirectory() as root:
                cold = one(model, backend, args.mode, root, args.timeout)
                warm = one(model, backend, args.mode, root, args.timeout)
            rows.append({"model": model, "backend": backend, "mode": args.mode, "cold_s": cold,
                         "warm_s": warm,
                         "ratio": warm / cold if cold and warm is not None else None})
            r = rows[-1]
            print(f"{model:28s} {backend:9s} cold {cold if cold is None else round(cold, 3)!s:>8} s"
                  f"  warm {warm if warm is None else round(warm, 3)!s:>8} s"
                  f"  warm/cold {'' if r['ratio'] is None else round(r['ratio'], 3)}", flush=True)
    for backend in args.backends.split(","):
        mine = [r for r in rows if r["backend"] == backend]
        print(f"{backend}: geomean cold {geomean([r['cold_s'] for r in mine])} s, warm "
              f"{geomean([r['warm_s'] for r in mine])} s, warm/cold "
              f"{geomean([r['ratio'] for r in mine])}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "python": sys.version.split()[0]}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
