"""Dynamic shapes, side by side (issue 35): a GPT-2-style and a BERT-style layer called at many
sequence lengths, compiled static (one compile per length) and dynamic (symbolic batch and
length, one compile), by ember and by Inductor, in one process. Prints a table: per model and
backend, the median ms per call over the lengths (each length timed after its warm-up: the best
of --rounds means of --reps calls), the compiles, and the compile seconds.

    python scripts/bench_dynamic.py [--device cpu|cuda] [--lengths 16,17,...] [--batch 2]
        [--reps 20] [--rounds 5] [--train] [--per-length]

--train times training steps instead: each call is the forward and a backward of
`out.square().mean()` (gradients set to None between calls), compiled as joint graphs.
--per-length also prints, per model, the ms per call of every backend at each length.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python", "differential"))
from test_diff_dynamic_shapes import BertLayer, GPT2Layer  # noqa: E402

import ember  # noqa: E402


def inputs(model, B, T, device, C):
    x = torch.randn(B, T, C, device=device)
    if model is BertLayer:
        mask = torch.ones(B, T, dtype=torch.long, device=device)
        mask[:, T // 2:] = 0
        return [x, mask]
    return [x]


def make(backend, dynamic, m):
    if backend == "eager":
        return m
    if backend == "ember":
        # A fresh cache per compile: the static rows compile once per length (past the cache
        # limit of 8 a frame would run uncompiled), and the dynamic ones start from none.
        ember._C.clear_capture_cache(None)
        return ember.compile(m, dynamic={False: False, True: None, "all": True}[dynamic])
    torch._dynamo.reset()
    return torch.compile(m, backend="inductor", dynamic=False if not dynamic else None)


def timed(fn, args, device, reps, rounds):
    """ms per call: the best of `rounds` means of `reps` calls (the minimum drops the rounds a
    busy machine slowed down)."""
    def sync():
        if device == "cuda":
            torch.cuda.synchronize()
    for _ in range(3):
        fn(*args)
    sync()
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn(*args)
        sync()
        best = min(best, (time.perf_counter() - t0) / reps * 1e3)
    return best


def step_of(fn, m):
    """A training step of `fn` (the module `m`, compiled or not)."""
    def step(*args):
        fn(*args).square().mean().backward()
        for p in m.parameters():
            p.grad = None
    return step


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--lengths", default="16,17,31,64,100,128,255,256,512")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5, help="timed rounds per length; the best")
    ap.add_argument("--train", action="store_true", help="forward and backward steps")
    ap.add_argument("--per-length", action="store_true", help="a table of ms per length too")
    a = ap.parse_args()
    lengths = [int(t) for t in a.lengths.split(",")]
    print(f"torch {torch.__version__}, device {a.device}, batch {a.batch}, width {a.width}, "
          f"lengths {lengths}{', training steps' if a.train else ''}")
    print(f"{'model':10} {'backend':16} {'median ms':>10} {'compiles':>9} {'compile s':>10}")
    for model in (GPT2Layer, BertLayer):
        per_length = {}
        torch.manual_seed(0)
        kw = {"max_len": 1024} if model is GPT2Layer else {}
        m = model(C=a.width, H=4, **kw).to(a.device)
        m = m.train() if a.train else m.eval()
        # dynamic: False static, True batch and length marked maybe_mark_dynamic, "all"
        # ember.compile(dynamic=True) with nothing marked (every dim a symbol; the width is
        # pinned to the weights' by the first norm or product).
        for backend, dynamic in [("eager", False), ("ember", False), ("ember", True),
                                 ("ember", "all"), ("inductor", False), ("inductor", True)]:
            if backend == "inductor" and not dynamic:
                fns = None  # one fresh torch.compile per length (Dynamo would go dynamic)
            ms, compile_s, compiles = [], 0.0, 0
            fn = None if backend != "eager" else m
            call = fn if not a.train or fn is None else step_of(fn, m)
            ember.metrics.reset()
            with contextlib.nullcontext() if a.train else torch.no_grad():
                for T in lengths:
                    args = inputs(model, a.batch, T, a.device, a.width)
                    if dynamic is True:
                        for x in args:
                            torch._dynamo.maybe_mark_dynamic(x, 0)
                            torch._dynamo.maybe_mark_dynamic(x, 1)
                    if fn is None or (not dynamic and backend != "eager"):
                        fn = make(backend, dynamic, m)
                        call = fn if not a.train else step_of(fn, m)
                    t0 = time.perf_counter()
                    call(*args)
                    first = time.perf_counter() - t0
                    ms.append(timed(call, args, a.device, a.reps, a.rounds))
                    steady = ms[-1] / 1e3
                    if first > 5 * steady + 0.05:  # this call compiled
                        compile_s += first - steady
                        compiles += 1
            name = (f"{backend} dynamic=True" if dynamic == "all" else
                    f"{backend}{' dynamic' if dynamic else ' static' if backend != 'eager' else ''}")
            print(f"{model.__name__:10} {name:16} {statistics.median(ms):10.3f} {compiles:9d} "
                  f"{compile_s:10.2f}", flush=True)
            per_length[name] = ms
        if a.per_length:
            print(f"{model.__name__} ms per length: " + " ".join(f"{T:>7}" for T in lengths))
            for name, ms in per_length.items():
                print(f"  {name:16} " + " ".join(f"{t:7.3f}" for t in ms))


if __name__ == "__main__":
    main()
