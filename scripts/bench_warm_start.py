"""Warm start: how long a second process takes to compile a model it compiled before, against the
first (cold caches), for ember.compile and for torch.compile (Inductor, with its FX graph cache
and AOTAutograd cache on, as by default).

Each (model, backend) runs in two fresh subprocesses sharing one cache root (EMBER_CACHE_DIR,
TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR under it, empty before the first): build the model
(the suite's small size), call it eagerly once, then time the compiled model's first call; the
compile time is that minus an eager call. Prints one table (model, backend, cold s, warm s,
warm/cold) and the geomeans.

    python scripts/bench_warm_start.py --models BertForMaskedLM,GPT2LMHeadModel,mlp --json out.json

On a GPU: `--device cuda --size full --dtype bf16` (bf16 under autocast, as the harness runs it);
the child synchronizes before and after each timed call, and the cold process compiles its Triton
kernels into the cache root's TRITON_CACHE_DIR / ember kernel cache, which the warm one reads.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import contextlib, sys, time, torch
from ember.bench import models as M
name, backend, mode, device, size, dtype = sys.argv[1:7]
torch.manual_seed(0)
wl = M.REGISTRY[name].build(size, mode, device)
model = wl.model
cuda = device.startswith("cuda")
def amp():
    if dtype == "bf16":
        return torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16)
    return contextlib.nullcontext()
def call(m):
    with amp():
        if mode == "training":
            M.reduce_to_scalar_loss(m(*wl.args, **wl.kwargs)).backward()
        else:
            with torch.no_grad():
                m(*wl.args, **wl.kwargs)
    if cuda:
        torch.cuda.synchronize()
call(model)
t = time.perf_counter(); call(model); eager = time.perf_counter() - t
if backend == "ember":
    import ember
    compiled = ember.compile(model)
else:
    compiled = torch.compile(model)
t = time.perf_counter(); call(compiled); first = time.perf_counter() - t
print("WARM_START", max(first - eager, 0.0))
if backend == "ember":
    import json
    from ember import capture
    recs = capture.records()
    steps = {}
    for r in recs:
        for step, sec in r["step_seconds"]:
            steps[step] = steps.get(step, 0.0) + sec
    print("BREAKDOWN", json.dumps({"frames": len(recs), "compile_s": sum(r["seconds"] for r in recs),
                                   "capture_s": sum(r["capture_seconds"] for r in recs),
                                   "kernels": sum(r["kernels"] for r in recs),
                                   "causal_attention": sum(r["causal_attention"] for r in recs),
                                   "steps": steps}))
"""


def one(model: str, backend: str, mode: str, root: str, timeout: float, device: str = "cpu",
        size: str = "small", dtype: str = "fp32", breakdown: dict | None = None) -> float | None:
    env = dict(os.environ, EMBER_CACHE_DIR=os.path.join(root, "ember"),
               TORCHINDUCTOR_CACHE_DIR=os.path.join(root, "inductor"),
               TRITON_CACHE_DIR=os.path.join(root, "triton"))
    r = subprocess.run([sys.executable, "-c", CHILD, model, backend, mode, device, size, dtype], env=env,
                       capture_output=True, text=True, timeout=timeout)
    seconds = None
    for line in r.stdout.splitlines():
        if line.startswith("WARM_START "):
            seconds = float(line.split()[1])
        elif line.startswith("BREAKDOWN ") and breakdown is not None:
            # Where ember's time went: its frame compiles (capture, then the pipeline's steps);
            # the rest of the first call is running it (and loading what it runs).
            breakdown.update(json.loads(line.split(" ", 1)[1]))
    if seconds is not None:
        return seconds
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
    p.add_argument("--device", default="cpu")
    p.add_argument("--size", default="small", choices=["small", "full"])
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--jobs", type=int, default=1, help="(model, backend) pairs run at once")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    run = (args.device, args.size, args.dtype)

    def pair(model: str, backend: str) -> dict:
        with tempfile.TemporaryDirectory() as root:
            cold_parts: dict = {}
            warm_parts: dict = {}
            cold = one(model, backend, args.mode, root, args.timeout, *run, breakdown=cold_parts)
            warm = one(model, backend, args.mode, root, args.timeout, *run, breakdown=warm_parts)
        r = {"model": model, "backend": backend, "mode": args.mode, "device": args.device,
             "size": args.size, "dtype": args.dtype, "cold_s": cold, "warm_s": warm,
             "ratio": warm / cold if cold and warm is not None else None}
        if cold_parts or warm_parts:
            r["cold_parts"], r["warm_parts"] = cold_parts, warm_parts
        print(f"{model:28s} {backend:9s} cold {cold if cold is None else round(cold, 3)!s:>8} s"
              f"  warm {warm if warm is None else round(warm, 3)!s:>8} s"
              f"  warm/cold {'' if r['ratio'] is None else round(r['ratio'], 3)}", flush=True)
        if warm_parts:
            top = sorted(warm_parts.get("steps", {}).items(), key=lambda kv: -kv[1])[:4]
            print(f"    warm: {warm_parts['frames']} frames, compile {warm_parts['compile_s']:.3f} s"
                  f" (capture {warm_parts['capture_s']:.3f}; "
                  + ", ".join(f"{k} {v:.3f}" for k, v in top) + ")"
                  f"; causal masks dropped: {warm_parts.get('causal_attention')}", flush=True)
        return r

    work = [(m, b) for m in args.models.split(",") for b in args.backends.split(",")]
    # --jobs > 1 runs pairs side by side (each pair's two processes in order): shorter wall time on
    # a many-core machine, at the price of some contention in the compile times.
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(args.jobs, 1)) as pool:
        rows = list(pool.map(lambda w: pair(*w), work))
    for backend in args.backends.split(","):
        mine = [r for r in rows if r["backend"] == backend]
        print(f"{backend}: geomean cold {geomean([r['cold_s'] for r in mine])} s, warm "
              f"{geomean([r['warm_s'] for r in mine])} s, warm/cold "
              f"{geomean([r['ratio'] for r in mine])}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "python": sys.version.split()[0], "jobs": args.jobs}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
