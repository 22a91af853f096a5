"""Prints what ember's training graphs of a suite model run besides generated kernels: the ATen
steps of the forward and the backward graph, by op, why the Triton path refused any kernel, and
the copies made because an extern returned another layout than traced.

    python scripts/debug_training_steps.py timm_resnet50 --dtype bf16 --batch-size 16
"""
import argparse
import collections
import re

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
        # The first node of each unexpected extern op, with its operands' definitions.
        for name, text in zip(("forward", "backward"), f.graphs):
            lines = text.splitlines()
            defs = {}
            for ln in lines:
                for tok in re.findall(r"%(\d+) :", ln.split("=")[0]):
                    defs[tok] = ln.strip()
            shown = set()
            steps = f.forward_steps if name == "forward" else f.backward_steps
            for st in steps:
                op = st.split()[1] if st.startswith("extern") else None
                if not op or op in shown or "convolution" in op or op in ("aten::mm", "aten::addmm"):
                    continue
                shown.add(op)
                node = next((ln.strip() for ln in lines if f"= {op}(" in ln), None)
                if node is None:
                    continue
                print(f"  {name} {op}: {node[:300]}")
                for tok in re.findall(r"%(\d+)", node.split("=", 1)[1]):
                    print(f"      {defs.get(tok, '%' + tok)[:300]}")
        fwd, bwd, notes = f.layout_copies
        print(f"  layout copies in one step: forward {fwd}, backward {bwd}")
        for note in notes:
            print("    ", note[:300])
        for why in f.refused_kernels:
            print("  refused:", why[:600])


if __name__ == "__main__":
    main()
