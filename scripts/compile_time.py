#!/usr/bin/env python3
"""Where ember.compile's first call spends its time on a model: the Triton compile batches (wall
seconds, kernels, and the slowest kernels with their configurations) against everything else
(capture, scheduling, code generation, the first run), with Python's stacks dumped when a model
runs past --stall seconds (a stuck compile shows where it is).

    python3 scripts/compile_time.py zoo-timm:xcit_small_12_p8_384 zoo-timm:edgenext_small \\
        --dtype bf16 --sources @R/slow

Uses ember.bench's models and Instance (the sweep's batch sizes, dtype and autocast). --sources
DIR writes each model's slowest kernels' sources there.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import statistics
import sys
import threading
import time

# --env NAME=VALUE (repeatable) sets an environment variable before ember is imported
# (EMBER_TRITON_AUTOTUNE=0: one launch configuration per kernel, none timed).
for _i, _a in enumerate(sys.argv[:-1]):
    if _a == "--env" and "=" in sys.argv[_i + 1]:
        _k, _v = sys.argv[_i + 1].split("=", 1)
        os.environ[_k] = _v

import torch  # noqa: E402

from ember.bench import harness as H  # noqa: E402
from ember.bench import models as M  # noqa: E402
from ember.bench import zoo  # noqa: E402  (registers zoo-timm:NAME and zoo-torchvision:NAME)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--mode", default="inference")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--stall", type=float, default=120.0,
                    help="dump every thread's Python stack after this many seconds of one model")
    ap.add_argument("--sources", default="", help="folder for the slowest kernels' sources")
    ap.add_argument("--json", default="")
    ap.add_argument("--env", action="append", default=[],
                    help="NAME=VALUE, set before ember is imported (repeatable)")
    ap.add_argument("--steps", type=int, default=0,
                    help="also time this many calls after the first (ms per call, median)")
    a = ap.parse_args()

    import ember
    from ember import _C
    from ember import _triton as T

    batches: list[tuple[int, float]] = []  # (kernels, wall seconds) per compile batch
    background: list[tuple[int, float]] = []  # the same, of the background's candidates

    def timed_compile(jobs, in_background=False):
        t0 = time.perf_counter()
        try:
            return T._compile(jobs, in_background)
        finally:
            (background if in_background else batches).append((len(jobs),
                                                                time.perf_counter() - t0))

    _C.set_triton_hooks(timed_compile, T._interpret)
    sources: dict[str, str] = {}
    orig_batch = T.compile_batch

    def keep_sources(requests, in_background=False):
        for r in requests:
            sources.setdefault(r[1], r[0])
        return orig_batch(requests, in_background)

    T.compile_batch = keep_sources
    rows = []
    for name in a.models:
        specs = zoo.expand(name) if name.startswith("zoo-") else [M.REGISTRY[name]]
        for spec in specs:
            batches.clear()
            background.clear()
            T.COMPILE_TIMES.clear()
            sources.clear()
            torch._dynamo.reset()
            wl = spec.build("full", a.mode, a.device, None)
            faulthandler.dump_traceback_later(a.stall, exit=False)
            # What has compiled by then, in case the model never finishes (a timeout kills it).
            timer = threading.Timer(a.stall, lambda: print(json.dumps({
                "stalled": spec.name, "triton_batches_done": batches[:],
                "slowest_so_far": sorted(T.COMPILE_TIMES, key=lambda r: -r[4])[: a.top]}),
                flush=True))
            timer.start()
            records_before = len(ember.capture.records())
            t0 = time.perf_counter()
            inst = H.Instance(wl.model, wl, a.mode, a.dtype, a.device, H.resolve_backend("ember-capture"))
            inst.step()
            torch.cuda.synchronize() if a.device.startswith("cuda") else None
            first = time.perf_counter() - t0
            first_kernels = len(T.COMPILE_TIMES)
            t_bg = time.perf_counter()
            ember.finish_compiles()  # candidates compiling in the background
            background_wait = time.perf_counter() - t_bg
            faulthandler.cancel_dump_traceback_later()
            timer.cancel()
            step_ms = None
            if a.steps:
                sync = torch.cuda.synchronize if a.device.startswith("cuda") else (lambda: None)
                for _ in range(3):
                    inst.step()
                times = []
                for _ in range(a.steps):
                    sync()
                    t1 = time.perf_counter()
                    inst.step()
                    sync()
                    times.append((time.perf_counter() - t1) * 1e3)
                step_ms = round(statistics.median(times), 3)
            triton_s = sum(s for _, s in batches)
            # ember's own time per compile-pipeline step and in the capture, over every graph
            # the first call compiled (the Triton batches are inside the "compile" steps).
            steps: dict[str, float] = {}
            capture_s = 0.0
            for rec in ember.capture.records()[records_before:]:
                capture_s += rec["capture_seconds"]
                for step, sec in rec.get("step_seconds", []):
                    steps[step] = steps.get(step, 0.0) + sec
            slow = sorted(T.COMPILE_TIMES, key=lambda r: -r[4])[: a.top]
            row = {"model": spec.name, "first_call_s": round(first, 2), "step_ms": step_ms,
                   "env": a.env,
                   "triton_batches": len(batches), "triton_wall_s": round(triton_s, 2),
                   "kernels_compiled": first_kernels,
                   "background_batches": len(background),
                   "background_kernels": sum(n for n, _ in background),
                   "background_wall_s": round(sum(s for _, s in background), 2),
                   "background_wait_s": round(background_wait, 2),
                   "kernel_seconds": round(sum(r[4] for r in T.COMPILE_TIMES), 2),
                   "other_s": round(first - triton_s, 2),
                   "capture_s": round(capture_s, 2),
                   "pipeline_steps_s": {k: round(v, 3) for k, v in
                                        sorted(steps.items(), key=lambda kv: -kv[1])[:12]},
                   "slowest": [(n, bp, b, w, round(s, 2)) for n, bp, b, w, s in slow]}
            print(json.dumps(row), flush=True)
            if a.sources:
                os.makedirs(a.sources, exist_ok=True)
                for n, *_ in slow[:3]:
                    if n in sources:
                        with open(os.path.join(a.sources, f"{spec.name.replace(':', '_')}__{n}.py"),
                                  "w") as f:
                            f.write(sources[n])
            rows.append(row)
            del inst, wl
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    _ = ember


if __name__ == "__main__":
    sys.exit(main())
