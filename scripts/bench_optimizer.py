"""Times one optimizer step (torch.optim Adam/AdamW/SGD) over a model's parameters: eager
(for-loop and foreach), ember.compile(opt.step), torch.compile(opt.step, backend="ember") and
Inductor's torch.compile(opt.step), side by side in one process, with ember's kernel counts.

    python scripts/bench_optimizer.py --opt Adam --layers 12 --width 512 --device cpu
"""

from __future__ import annotations

import argparse
import copy
import os
import time

import torch

import ember


def make(name: str, params, foreach: bool | None):
    kw = {} if foreach is None else {"foreach": foreach}
    if name == "Adam":
        return torch.optim.Adam(params, lr=1e-3, **kw)
    if name == "AdamW":
        return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, **kw)
    return torch.optim.SGD(params, lr=1e-2, momentum=0.9, **kw)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--opt", default="Adam", choices=["Adam", "AdamW", "SGD"])
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--steps", type=int, default=50)
    args = ap.parse_args()
    torch.manual_seed(0)
    layers = []
    for _ in range(args.layers):
        layers += [torch.nn.Linear(args.width, args.width), torch.nn.LayerNorm(args.width)]
    base = torch.nn.Sequential(*layers).to(args.device)
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    only = os.environ.get("BENCH_ONLY")
    variants = {
        "eager for-loop": (False, lambda s: s),
        "eager foreach": (True, lambda s: s),
        "ember.compile": (False, ember.compile),
        "torch.compile(backend=ember)": (False, lambda s: torch.compile(s, backend="ember")),
        "ember.compile, foreach=True": (True, ember.compile),
        "inductor": (False, torch.compile),
    }
    n_params = sum(1 for _ in base.parameters())
    print(f"{args.opt} over {n_params} parameters ({sum(p.numel() for p in base.parameters())} "
          f"elements), {args.device}, torch {torch.__version__}")
    for name, (foreach, wrap) in variants.items():
        if only and only not in name:
            continue
        model = copy.deepcopy(base)
        for p in model.parameters():
            p.grad = torch.randn_like(p)
        opt = make(args.opt, model.parameters(), foreach)
        torch._dynamo.reset()
        ember.metrics.reset()
        step = wrap(opt.step)
        t0 = time.perf_counter()
        for _ in range(3):  # compiles, and the first step's state
            step()
        sync()
        first = time.perf_counter() - t0
        kernels = ember.metrics.snapshot()["kernels"]
        t0 = time.perf_counter()
        for _ in range(args.steps):
            step()
        sync()
        ms = (time.perf_counter() - t0) / args.steps * 1e3
        extra = f", ember kernels {kernels}" if "ember" in name else ""
        print(f"  {name:30s} {ms:8.3f} ms/step  (first 3 steps {first:.2f} s{extra})")


if __name__ == "__main__":
    main()
