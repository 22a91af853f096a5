"""Prints what ember's training graphs of a suite model run besides generated kernels: the ATen
steps of the forward and the backward graph, by op, and why the Triton path refused any kernel.

    python scripts/debug_training_steps.py timm_resnet50 --dtype bf16 --batch-size 16
"""
import argparse
import collections

import torch

from ember.bench import harness as H
from ember.bench import models as M
from ember.testing import recorded_compiled_functions


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--dtype", default="fp32")
    p.add_argument("--device", default="cuda")
    p.add_argument("--size", default="full")
    p.add_argument("--batch-size", type=int, default=None)
    a = p.parse_args()
    wl = M.REGISTRY[a.model].build(a.size, "training", a.device, a.batch_size)
    with recorded_compiled_functions() as made:
        inst = H.Instance(wl.model, wl, "training", a.dtype, a.device, H.resolve_backend("ember"))
        inst.step()
    for i, f in enumerate(made):
        for name, steps in (("forward", f.forward_steps), ("backward", f.backward_steps)):
            kinds = collections.Counter(s for s in steps if s.startswith("extern"))
            kernels = sum(s.startswith("kernel") for s in steps)
            views = sum(s.startswith("view") for s in steps)
            print(f"graph {i} {name}: {kernels} kernels, {views} view steps")
            for s, n in kinds.most_common():
                print(f"  {n:4d} x {s[:150]}")
        for why in f.refused_kernels:
            print("  refused:", why[:600])


if __name__ == "__main__":
    main()
