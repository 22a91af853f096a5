#!/usr/bin/env python3
"""DDP and FSDP2 training step time at world size 1 (issue 38): eager, Inductor and ember, one
process, one device, the same wrapper and model for each backend.

    python3 scripts/ddp_step_time.py --models nanogpt,tv_resnet50 --wraps ddp,fsdp \\
        --backends eager,inductor,ember-capture,ember --dtype bf16 --json out.json

On a CUDA device the process group is NCCL (set NCCL_NVLS_ENABLE=0 as the device README says),
on the CPU gloo. Per (model, wrap): a fresh copy of the suite model (ember.bench's full size on
CUDA, small on the CPU) per backend, wrapped (DistributedDataParallel or FSDP2's fully_shard on
every ModuleList block and the root), compiled (`torch.compile(wrapped)` for Inductor,
`ember.compile(wrapped)` for ember-capture, `torch.compile(wrapped, backend="ember")` for ember),
trained with SGD on fixed batches. The first `--check` steps' losses and gradients are compared
with eager's (relative norm of the difference; bf16 autocast's rounding differs between
backends, so read them against the eager-vs-eager noise, which is 0); then the median step
(forward, backward, optimizer step, synchronized) of `--steps` after `--warmup`. World size 1
shows the overhead and correctness of the wrapper under each compiler; the overlap of
communication with compute needs several GPUs (issue 39).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import statistics
import time

import torch
import torch.distributed as dist


def shard(model: torch.nn.Module) -> torch.nn.Module:
    from torch.distributed.fsdp import fully_shard

    for m in model.modules():
        if isinstance(m, torch.nn.ModuleList):
            for block in m:
                fully_shard(block)
    return fully_shard(model)


def full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def compile_for(backend: str, wrapped: torch.nn.Module):
    if backend == "eager":
        return wrapped
    if backend == "inductor":
        return torch.compile(wrapped)
    import ember

    if backend == "ember-capture":
        return ember.compile(wrapped)
    if backend == "ember":
        return torch.compile(wrapped, backend="ember")
    raise SystemExit(f"unknown backend {backend}")


def run(model_name: str, wrap: str, backend: str, args, device: str) -> dict:
    from ember.bench import models as M

    torch.manual_seed(0)
    size = "full" if device.startswith("cuda") else "small"
    wl = M.REGISTRY[model_name].build(size, "training", device)
    model = wl.model.train()
    wrapped = (torch.nn.parallel.DistributedDataParallel(model) if wrap == "ddp" else shard(model))
    compiled = compile_for(backend, wrapped)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    autocast = (torch.autocast(device.split(":")[0], dtype=torch.bfloat16)
                if args.dtype == "bf16" else contextlib.nullcontext())

    def batch(step: int):
        g = torch.Generator(device="cpu").manual_seed(1000 + step % 4)
        xs = [a.clone() if isinstance(a, torch.Tensor) else a for a in wl.args]
        if xs and xs[0].is_floating_point():
            xs[0] = torch.randn(xs[0].shape, generator=g).to(xs[0])
        return xs

    def step(i: int):
        with autocast:
            loss = M.reduce_to_scalar_loss(wl.loss_fn(compiled(*batch(i), **wl.kwargs)))
        loss.backward()
        grads = None
        if i < args.check:
            grads = [full(p.grad).detach().float().clone() if p.grad is not None else None
                     for p in model.parameters()]
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach().float().item(), grads

    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    t0 = time.perf_counter()
    checks = [step(i) for i in range(args.check)]
    sync()
    first = time.perf_counter() - t0
    for i in range(args.warmup):
        step(args.check + i)
    times = []
    for i in range(args.steps):
        sync()
        t = time.perf_counter()
        step(i)
        sync()
        times.append(time.perf_counter() - t)
    peak = torch.cuda.max_memory_allocated() / 2**20 if device.startswith("cuda") else None
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    counters = {}
    if backend.startswith("ember"):
        import ember

        snap = ember.metrics.snapshot()
        counters = {k: snap[k] for k in ("graphs", "training_graphs", "graph_breaks", "kernels")}
        ember.metrics.reset()
    q = statistics.quantiles(times, n=4) if len(times) >= 4 else [min(times), 0, max(times)]
    return {"model": model_name, "wrap": wrap, "backend": backend,
            "median_ms": 1e3 * statistics.median(times), "q1_ms": 1e3 * q[0], "q3_ms": 1e3 * q[2],
            "first_steps_s": first, "peak_mib": peak, "checks": checks, **counters}


def compare(r: dict, eager_checks: list | None) -> None:
    """A backend's losses and gradients of the first steps against eager's of the same (model,
    wrap): the largest relative difference (None without an eager row)."""
    worst_loss = worst_grad = None
    if eager_checks is not None and "checks" in r:
        worst_loss = worst_grad = 0.0
        for (loss, grads), (loss_e, grads_e) in zip(r["checks"], eager_checks):
            worst_loss = max(worst_loss, abs(loss - loss_e) / max(abs(loss_e), 1e-12))
            for g, ge in zip(grads, grads_e):
                if g is not None and ge is not None:
                    d = ((g - ge).norm() / ge.norm().clamp_min(1e-12)).item()
                    worst_grad = max(worst_grad, d)
    r["loss_rel"], r["grad_rel"] = worst_loss, worst_grad


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="nanogpt")
    p.add_argument("--wraps", default="ddp,fsdp")
    p.add_argument("--backends", default="eager,inductor,ember-capture,ember")
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--check", type=int, default=3)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    cuda = torch.cuda.is_available()
    device = "cuda:0" if cuda else "cpu"
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    if cuda:
        torch.cuda.set_device(0)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    dist.init_process_group("nccl" if cuda else "gloo", rank=0, world_size=1)
    rows = []
    for model in args.models.split(","):
        for wrap in args.wraps.split(","):
            eager_checks = None
            for backend in args.backends.split(","):
                try:
                    r = run(model, wrap, backend, args, device)
                except Exception as e:  # a failure is a row, not the end of the run
                    r = {"model": model, "wrap": wrap, "backend": backend,
                         "error": f"{type(e).__name__}: {str(e)[:300]}"}
                if cuda:
                    torch.cuda.empty_cache()
                if backend == "eager" and "checks" in r:
                    eager_checks = r["checks"]
                compare(r, eager_checks)
                r.pop("checks", None)
                rows.append(r)
                print(json.dumps(r), flush=True)
                if args.json:  # after every row: a run cut off keeps what it measured
                    with open(args.json, "w") as f:
                        json.dump({"device": torch.cuda.get_device_name(0) if cuda else "cpu",
                                   "torch": torch.__version__, "rows": rows}, f, indent=1)
    print(f"{'model':<16}{'wrap':<6}{'backend':<15}{'step ms':>9}{'IQR':>16}{'first s':>9}"
          f"{'peak MiB':>10}{'loss rel':>10}{'grad rel':>10}")
    for r in rows:
        if "error" in r:
            print(f"{r['model']:<16}{r['wrap']:<6}{r['backend']:<15} error: {r['error'][:80]}")
            continue
        peak = f"{r['peak_mib']:.0f}" if r["peak_mib"] is not None else "-"
        rel = (f"{r['loss_rel']:>10.1e}{r['grad_rel']:>10.1e}" if r["loss_rel"] is not None
               else f"{'-':>10}{'-':>10}")
        print(f"{r['model']:<16}{r['wrap']:<6}{r['backend']:<15}{r['median_ms']:>9.2f}"
              f"{r['q1_ms']:>8.2f}-{r['q3_ms']:<7.2f}{r['first_steps_s']:>9.2f}{peak:>10}{rel}")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
