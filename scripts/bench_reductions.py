"""Microbenchmark of reduction kernels: eager ATen vs ember's compiled graph, one op per graph
(and a few reductions with their pointwise prologues and epilogues).

    python scripts/bench_reductions.py [--filter SUBSTR] [--reps N] [--markdown] [--inductor]

Each case is traced once and compiled with reductions on (`_C.CompiledGraph`, called directly, so
neither side pays Dynamo). Time = best of `reps` batches (~5 ms each, eager and ember batches
interleaved so both see the same load) of the mean time per call; both sides run with torch's intra-op threads (`--threads`; ember's kernels share
torch's OpenMP runtime, so the setting applies to both). The kernel count column says
whether ember made a kernel (0: ATen call).
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from ember import _C
from ember.tracing import trace_with_structure


def _case(name, fn, *shapes, dtype=torch.float32, make=None):
    def inputs():
        if make is not None:
            return make()
        return [torch.randn(*s, dtype=dtype) for s in shapes]

    shape = "x".join(str(d) for d in shapes[0]) if shapes else ""
    suffix = "" if dtype == torch.float32 else f" {str(dtype).replace('torch.', '')}"
    return name, shape + suffix, fn, inputs


def cases():
    ln = lambda n: (lambda x, w, b: F.layer_norm(x, (n,), w, b, 1e-5))  # noqa: E731
    out = []
    for s in [(256, 1024), (8, 8, 32, 32), (2, 12, 64, 64), (1, 12, 128, 128), (1, 4, 512, 512),
              (32, 40)]:
        out.append(_case("softmax", lambda x: F.softmax(x, -1), s))
    out.append(_case("softmax", lambda x: F.softmax(x, -1), (1, 12, 128, 128), dtype=torch.bfloat16))
    out.append(_case("softmax dim0", lambda x: F.softmax(x, 0), (512, 256)))
    for s in [(256, 1024), (128, 1000)]:
        out.append(_case("log_softmax", lambda x: F.log_softmax(x, -1), s))
    for rows, n in [(64, 64), (8192, 64), (256, 256), (256, 768), (256, 1024), (2048, 1024),
                    (16, 32)]:
        out.append(_case("layer_norm", ln(n), (rows, n), (n,), (n,)))
    for s in [(256, 1024), (8192, 64), (64, 4096), (16, 32)]:
        out.append(_case("sum -1", lambda x: x.sum(-1), s))
    out.append(_case("sum 0", lambda x: x.sum(0), (1024, 256)))
    out.append(_case("sum all", lambda x: x.sum(), (1024, 1024)))
    out.append(_case("mean -1", lambda x: x.mean(-1), (256, 1024)))
    out.append(_case("amax -1", lambda x: x.amax(-1), (256, 1024)))
    out.append(_case("var -1", lambda x: x.var(-1), (256, 1024)))
    out.append(_case("argmax -1", lambda x: x.argmax(-1), (256, 1024)))
    out.append(_case("logsumexp -1", lambda x: x.logsumexp(-1), (256, 1024)))
    out.append(_case("sum -1", lambda x: x.sum(-1), (256, 1024), dtype=torch.bfloat16))
    out.append(_case("sum -1 int64", lambda x: x.sum(-1), (256, 1024),
                     make=lambda: [torch.randint(-100, 100, (256, 1024))]))
    # Reductions with their pointwise prologues and epilogues (one kernel each in ember).
    for s in [(8, 128, 512), (4096, 768)]:
        out.append(_case("rms_norm", _rms_norm, s, s[-1:]))
    for b, h, n in [(2, 12, 128), (1, 12, 512)]:
        out.append(_case("softmax(x*s+mask)", lambda x, m: F.softmax(x * 0.125 + m, -1),
                         (b, h, n, n), (b, 1, 1, n)))
    for rows, n in [(256, 768), (2048, 1024)]:
        out.append(_case("layer_norm(x+res)",
                         lambda x, r, w, b, n=n: F.layer_norm(x + r, (n,), w, b),
                         (rows, n), (rows, n), (n,), (n,)))
    return out


def _rms_norm(x, w):  # Llama's
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
    return w * h.to(x.dtype)


def batch_size(fn, args, clock, seconds=0.005):
    fn(*args)
    t0 = clock()
    n = 0
    while clock() - t0 < seconds:
        fn(*args)
        n += 1
    return max(1, n)


def best_times(fns, args, reps, clock=time.perf_counter):
    """Best-of-`reps` mean time per call (ms) of each of `fns`, timed in interleaved batches so
    that all see the same machine load."""
    sizes = [batch_size(f, args, clock) for f in fns]
    best = [float("inf")] * len(fns)
    for _ in range(reps):
        for i, (f, n) in enumerate(zip(fns, sizes)):
            t0 = clock()
            for _ in range(n):
                f(*args)
            best[i] = min(best[i], (clock() - t0) / n)
    return [b * 1e3 for b in best]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--filter", default="")
    p.add_argument("--reps", type=int, default=40)
    p.add_argument("--markdown", action="store_true")
    p.add_argument("--threads", type=int, default=0, help="intra-op threads (0: torch's default)")
    p.add_argument("--inductor", action="store_true",
                   help="time eager, torch.compile(backend='inductor') and torch.compile("
                        "backend='ember') side by side (all compiled calls pay Dynamo's guards)")
    p.add_argument("--cpu-time", action="store_true",
                   help="time with the thread's CPU clock (with --threads 1: ignores time the "
                        "thread was descheduled, for a machine shared with other work)")
    a = p.parse_args()
    clock = time.thread_time if a.cpu_time else time.perf_counter
    if a.threads:
        torch.set_num_threads(a.threads)  # one OpenMP runtime: also ember's kernels
    torch.manual_seed(0)
    rows = []
    for name, shape, fn, inputs in cases():
        if a.filter and a.filter not in f"{name} {shape}":
            continue
        args = inputs()
        with torch.no_grad():
            graph, _ = trace_with_structure(fn, args)
            compiled = _C.CompiledGraph(graph, codegen=True, reductions=True)
            want = fn(*args)
            got = compiled(*args)[0]
            ok = torch.allclose(got.double(), want.double(), rtol=1e-2, atol=1e-3, equal_nan=True)
            fns = [fn, compiled]
            if a.inductor:
                torch._dynamo.reset()
                fns = [fn, torch.compile(fn, backend="ember"), torch.compile(fn, backend="inductor")]
                for f in fns[1:]:
                    f(*args)  # compile
            times = best_times(fns, args, a.reps, clock)
        te, tc = times[0], times[1]
        ti = times[2] if a.inductor else None
        rows.append((name, shape, te, tc, ti, compiled.num_kernels, ok))
        if not a.markdown:
            ind = f"  inductor {ti:8.4f} ms x{te / ti:5.2f}" if ti else ""
            print(f"{name:18s} {shape:22s} eager {te:8.4f} ms  ember {tc:8.4f} ms  "
                  f"x{te / tc:5.2f}{ind}  kernels {compiled.num_kernels}"
                  f"{'' if ok else '  MISMATCH'}", flush=True)
    if a.markdown:
        extra = " Inductor ms | Inductor speedup |" if a.inductor else ""
        print("| op | shape | eager ms | ember ms | speedup |" + extra + " kernels |")
        print("| --- | --- | ---: | ---: | ---: |" + (" ---: | ---: |" if a.inductor else "") + " ---: |")
        for name, shape, te, tc, ti, k, ok in rows:
            ind = f" {ti:.4f} | {te / ti:.2f}x |" if ti else ""
            print(f"| {name} | {shape} | {te:.4f} | {tc:.4f} | {te / tc:.2f}x |{ind} {k} |")


if __name__ == "__main__":
    main()
