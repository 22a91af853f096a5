#!/usr/bin/env python3
"""Where a model's time goes on the GPU, per backend: torch.profiler's CUDA kernels of a few
inference steps, grouped by kernel name, beside the step time.

    python3 scripts/profile_model.py BertForMaskedLM DistilBertForMaskedLM --dtype bf16 \\
        --backends eager,ember-capture --top 25 --json out.json

Uses ember.bench's model suite and its Instance (same batch sizes, dtype handling and autocast as
`python -m ember.bench`). Kernel names: eager's ATen kernels, cuBLAS/cuDNN/flash kernels, and
ember's generated Triton kernels (`ember_k<hash>_fused_<ops>`; their source is printed with
--sources).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import time

import torch

from ember.bench import harness as H
from ember.bench import models as M
from ember.bench import zoo
from ember.testing import recorded_compiled_functions


RECORD_SHAPES = False
PRODUCTS = ("aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm", "aten::matmul",
            "aten::_scaled_dot_product_efficient_attention",
            "aten::_scaled_dot_product_flash_attention", "aten::convolution")


def training_memory(inst: H.Instance, saved_bytes: int) -> dict:
    """MiB over the memory held before a training step: held after the forward (saved activations
    and outputs), the forward's peak, and the step's peak (forward and backward)."""
    torch.cuda.synchronize()
    inst.opt.zero_grad(set_to_none=True)
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    with inst.amp():
        loss, out = inst.callable(*inst.args, **inst.kwargs)
    torch.cuda.synchronize()
    held = torch.cuda.memory_allocated() - base
    fwd_peak = torch.cuda.max_memory_allocated() - base
    loss.backward()
    torch.cuda.synchronize()
    step_peak = torch.cuda.max_memory_allocated() - base
    del loss, out
    return {"held_after_forward_mb": held / 2**20, "forward_peak_mb": fwd_peak / 2**20,
            "step_peak_mb": step_peak / 2**20, "saved_mb": saved_bytes / 2**20}


def profile(model: str, backend: str, dtype: str, steps: int, top: int, device: str = "cuda",
            size: str = "full", batch_size: int | None = None, mode: str = "inference") -> dict:
    spec = zoo.expand(model)[0] if model.startswith(zoo.PREFIX) else M.REGISTRY[model]
    wl = spec.build(size, mode, device, batch_size)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    compile_fn = None if backend == "eager" else H.resolve_backend(backend)
    # A fresh Dynamo per run: code shared by models (transformers' helpers) otherwise recompiles
    # with automatic dynamic shapes, and ember runs a graph with SymInt inputs eagerly.
    torch._dynamo.reset()
    with recorded_compiled_functions() as made:  # ember's training graphs, for saved_bytes
        inst = H.Instance(wl.model, wl, mode, dtype, device, compile_fn)
        t0 = time.perf_counter()
        inst.step()
        sync()
        first = time.perf_counter() - t0
    for _ in range(3):
        inst.step()
    sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        inst.step()
    sync()
    step_ms = (time.perf_counter() - t0) / steps * 1e3
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts, record_shapes=RECORD_SHAPES) as prof:
        for _ in range(steps):
            inst.step()
        sync()
    per = collections.defaultdict(lambda: [0.0, 0])
    for e in prof.events():
        on_device = e.device_type == torch.autograd.DeviceType.CUDA
        # A record_function range (ember's `ember::` steps, a module's range) also appears on the
        # device's timeline, spanning the kernels it launched: not a kernel, and counted, it
        # doubled ember's "kernels ms".
        if on_device and (getattr(e, "is_user_annotation", False) or e.name.startswith("ember::")):
            continue
        if on_device or (device == "cpu" and e.name.startswith("aten::")):
            d = per[e.name]
            d[0] += (e.device_time if on_device else e.self_cpu_time_total) / steps / 1e3  # ms
            d[1] += 1
    rows = sorted(per.items(), key=lambda kv: -kv[1][0])
    kernel_ms = sum(v[0] for v in per.values())
    launches = sum(v[1] for v in per.values()) / steps
    products = collections.Counter()
    if RECORD_SHAPES:  # the products' input shapes: which layouts reach cuBLAS and cuDNN
        for e in prof.events():
            if e.name in PRODUCTS and e.device_type != torch.autograd.DeviceType.CUDA:
                products[f"{e.name} {e.input_shapes}"] += 1
    memory = {}
    if mode == "training" and device.startswith("cuda"):
        memory = training_memory(inst, sum(f.saved_bytes for f in made))
    if mode == "training" and made:
        # What the forward keeps for the backward, by producing op (graph/partition.h).
        saved = collections.defaultdict(lambda: [0, 0])
        for f in made:
            for op, _type, nbytes in f.saved_values:
                saved[op][0] += nbytes
                saved[op][1] += 1
        memory["saved_by_op_mb"] = [(op, round(b / 2**20, 1), n)
                                    for op, (b, n) in sorted(saved.items(), key=lambda kv: -kv[1][0])]
    # ember's kernels by name: their buffers' MiB and ops (Executor::describe_steps), for the
    # bandwidth each reaches.
    kernels = {}
    for f in made:
        for line in f.forward_steps + f.backward_steps:
            m = KERNEL_STEP.match(line)
            if m:
                kernels[m.group(1)] = (float(m.group(2)), short_ops(m.group(3)))
    gen_ms = gen_mib = 0.0
    for name, (ms, n) in per.items():
        if name in kernels:
            gen_ms += ms
            gen_mib += kernels[name][0] * n / steps
    return {"model": model, "backend": backend, "dtype": dtype, "mode": mode, "step_ms": step_ms,
            "kernels": kernels, "generated_ms": gen_ms, "generated_mib": gen_mib,
            "memory": memory, "first_call_s": first, "kernel_ms": kernel_ms, "launches_per_step": launches,
            "top": [(name[:140], round(ms, 4), n // steps) for name, (ms, n) in rows[:top]],
            "products": [(k, n // steps) for k, n in products.most_common(top)]}


KERNEL_STEP = re.compile(r"kernel (\S+)(?: \(combo of \d+\))? \[([\d.]+) MiB\]: (.*)")


def short_ops(ops: str) -> str:
    """'aten::add.Tensor, aten::add.Tensor, aten::gelu' as 'addx2 gelu'."""
    names = [o.strip().removeprefix("aten::").split(".")[0] for o in ops.split(",")]
    return " ".join(f"{n}x{c}" if c > 1 else n for n, c in collections.Counter(names).most_common())


def print_sources(names: list[str]) -> None:
    """The Triton source of each named ember kernel, from the kernel cache (ember._triton keeps
    `<key>.py` beside each cubin)."""
    import glob  # noqa: PLC0415

    from ember import _triton  # noqa: PLC0415

    found = {}
    for path in glob.glob(os.path.join(_triton.cache_dir(), "*.py")):
        with open(path) as f:
            text = f.read()
        for name in names:
            if name not in found and f"def {name}(" in text:
                found[name] = text
    for name in names:
        print(f"\n-- source of {name}:")
        text = found.get(name, "  (not in the kernel cache)")
        start = text.find("@triton.jit\ndef " + name)
        print(text[start:] if start >= 0 else text)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("models", nargs="+")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--mode", default="inference", choices=("inference", "training"),
                   help="training: a training step (forward, backward, SGD), with its memory")
    p.add_argument("--backends", default="eager,ember-capture")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--top", type=int, default=20)
    p.add_argument("--json", default=None)
    p.add_argument("--device", default="cuda")
    p.add_argument("--size", default="full", help="the suite's size: full or small")
    p.add_argument("--batch-size", type=int, default=None, help="override the model's batch size")
    p.add_argument("--sources", type=int, default=0,
                   help="print the Triton source of the N slowest ember kernels of each run")
    p.add_argument("--slow-sources", type=float, default=0.0, metavar="TBPS",
                   help="also print the source of each listed ember kernel of at least 16 MiB that "
                        "reaches less than TBPS TB/s")
    p.add_argument("--no-tf32", action="store_true",
                   help="fp32 products without TF32 (on by default, as ember.bench)")
    p.add_argument("--shapes", action="store_true",
                   help="also list the ATen matrix products (mm, bmm, addmm, ...) by input shapes")
    a = p.parse_args()
    if torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_tf32 = not a.no_tf32
        torch.backends.cudnn.allow_tf32 = not a.no_tf32
    global RECORD_SHAPES
    RECORD_SHAPES = a.shapes
    out = []
    for model in a.models:
        for backend in a.backends.split(","):
            try:
                r = profile(model, backend, a.dtype, a.steps, a.top, a.device, a.size, a.batch_size,
                            a.mode)
            except Exception as e:  # noqa: BLE001
                print(f"{model} {backend}: failed: {type(e).__name__}: {e}")
                continue
            out.append(r)
            print(f"\n== {model} {backend} {a.dtype}: step {r['step_ms']:.3f} ms, kernels "
                  f"{r['kernel_ms']:.3f} ms, {r['launches_per_step']:.0f} launches, first call "
                  f"{r['first_call_s']:.1f} s")
            if r["memory"]:
                sizes = {k: v for k, v in r["memory"].items() if k != "saved_by_op_mb"}
                if sizes:
                    print("  memory MiB: " + ", ".join(f"{k[:-3]} {v:.0f}" for k, v in sizes.items()))
                if r["memory"].get("saved_by_op_mb"):
                    print("  saved MiB by op: " + ", ".join(
                        f"{op} {mb} (x{n})" for op, mb, n in r["memory"]["saved_by_op_mb"][:8]))
            if r["generated_ms"]:
                print(f"  ember's kernels: {r['generated_ms']:.3f} ms, {r['generated_mib']:.0f} MiB of "
                      f"buffers, {r['generated_mib'] * 2**20 / (r['generated_ms'] * 1e-3) / 1e12:.2f} TB/s")
            for name, ms, n in r["top"]:
                k = r["kernels"].get(name)
                if k:  # MiB per launch, and the bandwidth that gives at ms / n per launch
                    name += f"  [{k[0]:.1f} MiB, {k[0] * 2**20 * n / (ms * 1e-3) / 1e12:.2f} TB/s] {k[1]}"
                print(f"  {ms:8.4f} ms  x{n:<4d} {name}")
            for name, n in r["products"]:
                print(f"  x{n:<4d} {name}")
            names = [name for name, _, _ in r["top"] if name.startswith("ember_k")][:a.sources]
            if a.slow_sources:
                # Listed kernels of at least 16 MiB below that bandwidth, whatever their rank.
                for name, ms, n in r["top"]:
                    k = r["kernels"].get(name)
                    if k and k[0] >= 16 and k[0] * 2**20 * n / (ms * 1e-3) / 1e12 < a.slow_sources:
                        names += [name] if name not in names else []
            if names:
                print_sources(names)
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
