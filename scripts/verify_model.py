#!/usr/bin/env python3
"""Runs a suite model once under ember.compile with EMBER_VERIFY_KERNELS=1: every generated kernel
is also run on the unfused program's values of its inputs, and outputs that differ from the ATen
ops' are printed ("[ember verify] ..." lines on stderr, each kernel once, with the Triton source
of each kernel that differs). Then compares the model's outputs with eager's.

    python3 scripts/verify_model.py T5Small --dtype bf16
"""

from __future__ import annotations

import argparse
import os

os.environ["EMBER_VERIFY_KERNELS"] = "1"

import torch  # noqa: E402

from ember.bench import harness as H  # noqa: E402
from ember.bench import models as M  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("models", nargs="+")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--device", default="cuda")
    p.add_argument("--size", default="full")
    a = p.parse_args()
    for model in a.models:
        wl = M.REGISTRY[model].build(a.size, "inference", a.device)
        eager = H.Instance(wl.model, wl, "inference", a.dtype, a.device, None)
        ref = eager.step()
        inst = H.Instance(wl.model, wl, "inference", a.dtype, a.device,
                          H.resolve_backend("ember-capture"))
        out = inst.step()
        print(f"== {model} {a.dtype}: ran under EMBER_VERIFY_KERNELS=1", flush=True)
        for (name, r), (_, o) in zip(H.flatten(ref), H.flatten(out)):
            if isinstance(r, torch.Tensor) and r.is_floating_point():
                d = (r.double() - o.double()).abs()
                print(f"  {name}: max |ember - eager| {d.max().item():.4g}, "
                      f"NaN in ember {torch.isnan(o).any().item()}", flush=True)

if __name__ == "__main__":
    main()
