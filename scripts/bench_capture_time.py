"""Capture time per model: ember.compile's bytecode capture against Dynamo's.

Dynamo: the first call under torch.compile(backend="eager") (Dynamo's capture and guards, no
compiler behind it) minus eager's first call. ember.compile: the time its interpreter spends
tracing the frames (`capture_seconds` of its compile records; ember's own compile of the graph,
kernels included, is not counted, as Dynamo's eager backend compiles nothing).

    python scripts/bench_capture_time.py [--only mlp,nanogpt,...] [--size small]
"""

from __future__ import annotations

import argparse
import time

import torch

import ember
import ember.capture
from ember.bench import models


def first_call(fn, args, kwargs) -> float:
    t0 = time.perf_counter()
    with torch.no_grad():
        fn(*args, **kwargs)
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--only", default="mlp,nanogpt,tiny_resnet,BertForMaskedLM,GPT2LMHeadModel")
    p.add_argument("--size", default="small")
    a = p.parse_args()
    torch.set_num_threads(2)
    print("| model | Dynamo capture s | ember.compile capture s | ratio | ember graphs |")
    print("|---|---|---|---|---|")
    for name in a.only.split(","):
        wl = models.REGISTRY[name].build(a.size, "inference", "cpu")
        wl.model.eval()
        eager = min(first_call(wl.model, wl.args, wl.kwargs) for _ in range(3))
        torch._dynamo.reset()
        dyn = first_call(torch.compile(wl.model, backend="eager"), wl.args, wl.kwargs) - eager
        before = len(ember.capture.records())
        first_call(ember.compile(wl.model), wl.args, wl.kwargs)
        recs = ember.capture.records()[before:]
        cap = sum(r["capture_seconds"] for r in recs)
        graphs = sum(1 for r in recs if r["captured"])
        print(f"| {name} | {dyn:.3f} | {cap:.3f} | {cap / dyn:.2f}x | {graphs} |")


if __name__ == "__main__":
    main()
