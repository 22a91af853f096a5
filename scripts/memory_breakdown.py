#!/usr/bin/env python3
"""Where a model's CUDA memory goes, per backend: what the compiled model holds between calls
(beyond the model itself) and what one call allocates at its peak, with the blocks behind each
matched to the model's parameters by size.

    python3 scripts/memory_breakdown.py zoo-timm:levit_512 --dtype bf16 \\
        --backends eager,inductor,ember-capture --json out.json

Same Instance as `python -m ember.bench` (batch size, autocast). For each backend: `held_mb`,
the memory allocated after the warm-up calls over the memory before the model's copy was made,
less the model's own parameters and buffers; `step_peak_mb`, max_memory_allocated during one call
over the memory before it (the harness's peak is the sum of the two, with the model). The held
blocks are grouped by whether their requested size is a parameter's numel times 2 (a bf16/fp16
copy), times 4 (an fp32 copy), or neither; the call's peak lists the live blocks it allocated,
largest first, from torch.cuda.memory's allocation history.
"""

from __future__ import annotations

import argparse
import collections
import json

import torch

from ember.bench import harness as H
from ember.bench import models as M
from ember.bench import zoo


def live_blocks() -> list[int]:
    """Requested sizes of the allocated blocks now."""
    out = []
    for seg in torch.cuda.memory._snapshot()["segments"]:
        for b in seg["blocks"]:
            if b["state"] == "active_allocated":
                out.append(b.get("requested_size", b["size"]))
    return out


def classify(sizes: list[int], numels: collections.Counter) -> dict:
    """MiB of blocks whose size is a parameter's numel x2, x4, or neither (with the largest)."""
    half = {n * 2 for n in numels}
    full = {n * 4 for n in numels}
    groups = collections.defaultdict(lambda: [0, 0])
    other = []
    for s in sizes:
        key = "param_x2" if s in half else "param_x4" if s in full else "other"
        groups[key][0] += s
        groups[key][1] += 1
        if key == "other":
            other.append(s)
    out = {k: {"mb": round(v[0] / 2**20, 1), "blocks": v[1]} for k, v in groups.items()}
    out["other_largest_mb"] = [round(s / 2**20, 2) for s in sorted(other, reverse=True)[:12]]
    return out


def peak_live(trace: list[dict]) -> list[int]:
    """The blocks live at the peak of an allocation trace (allocated within it)."""
    live: dict[int, int] = {}
    cur = best = 0
    at_peak: list[int] = []
    for e in trace:
        if e["action"] == "alloc":
            live[e["addr"]] = e["size"]
            cur += e["size"]
            if cur > best:
                best, at_peak = cur, sorted(live.values(), reverse=True)
        elif e["action"] == "free_completed" and e["addr"] in live:
            cur -= live.pop(e["addr"])
    return at_peak


def measure(model: str, backend: str, dtype: str, size: str, batch_size: int | None) -> dict:
    spec = zoo.expand(model)[0] if model.startswith(zoo.PREFIX) else M.REGISTRY[model]
    torch._dynamo.reset()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    wl = spec.build(size, "inference", "cuda", batch_size)
    compile_fn = None if backend == "eager" else H.resolve_backend(backend)
    inst = H.Instance(wl.model, wl, "inference", dtype, "cuda", compile_fn)
    state = list(inst.model.parameters()) + list(inst.model.buffers())
    model_bytes = sum(t.numel() * t.element_size() for t in state)
    numels = collections.Counter(t.numel() for t in state if t.numel() > 4096)
    for _ in range(3):
        inst.step()
    torch.cuda.synchronize()
    inputs = sum(t.numel() * t.element_size() for t in inst.args if isinstance(t, torch.Tensor))
    held = torch.cuda.memory_allocated() - base - model_bytes - inputs
    held_blocks = live_blocks()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.memory._record_memory_history(max_entries=200000)
    out = inst.step()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    del out
    trace = [e for dev in snap.get("device_traces", []) for e in dev]
    at_peak = peak_live(trace)
    r = {"model": model, "backend": backend, "model_mb": round(model_bytes / 2**20, 1),
         "held_mb": round(held / 2**20, 1), "step_peak_mb": round(peak / 2**20, 1),
         "harness_peak_mb": round((model_bytes + held + peak) / 2**20, 1),
         "held_blocks": classify(held_blocks, numels),
         "peak_live_mb": [round(s / 2**20, 2) for s in at_peak[:16]],
         "peak_live_blocks": len(at_peak),
         "peak_live_param_sized": classify(at_peak, numels)}
    del inst, wl
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return r


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="+")
    p.add_argument("--backends", default="eager,inductor,ember-capture")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--size", default="full")
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    rows = []
    for model in args.models:
        for backend in args.backends.split(","):
            try:
                r = measure(model, backend, args.dtype, args.size, args.batch_size)
            except Exception as e:  # noqa: BLE001
                r = {"model": model, "backend": backend, "error": f"{type(e).__name__}: {e}"[:300]}
            rows.append(r)
            print(json.dumps(r), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
