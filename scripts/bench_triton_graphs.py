"""ember.compile on CUDA graphs (generated Triton kernels launched from C++) against eager and
torch.compile (Inductor), side by side in one process: median ms per call (do_bench), compile
seconds of the first call. Issue 7's first runtime slice; not the model suite yet.

    python3 scripts/bench_triton_graphs.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import time

import torch
import torch.nn.functional as F
import triton.testing

import ember


def cases():
    d = "cuda"
    x = torch.randn(8192, 4096, device=d)
    b = torch.randn(4096, device=d)
    h = torch.randn(8192, 1024, device=d)
    w, bb = torch.randn(1024, device=d), torch.randn(1024, device=d)
    xb = x.bfloat16()
    tiny = torch.randn(16, device=d)
    return [
        ("gelu(x + b) * 2, 8192x4096 f32", lambda x, b: F.gelu(x + b) * 2, (x, b)),
        ("bf16 pointwise, 8192x4096", lambda x: (x * x + 1).relu() / (x.abs() + 2), (xb,)),
        ("softmax, 8192x4096 f32", lambda x: torch.softmax(x, -1), (x,)),
        ("layer_norm, 8192x1024 f32", lambda h, w, b: F.layer_norm(h, (1024,), w, b), (h, w, bb)),
        ("sum(-1), 8192x4096 f32", lambda x: x.sum(-1), (x,)),
        ("x + 1, 16 f32 (per-call overhead)", lambda x: x + 1, (tiny,)),
    ]


def timed_first(fn, args):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn(*args)
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    a = ap.parse_args()
    rows = []
    with torch.no_grad():
        for name, fn, args in cases():
            eager_ms = triton.testing.do_bench(lambda: fn(*args), return_mode="median")
            ind = torch.compile(fn)
            ind_compile = timed_first(ind, args)
            ind_ms = triton.testing.do_bench(lambda: ind(*args), return_mode="median")
            em = ember.compile(fn)
            em_compile = timed_first(em, args)
            out, ref = em(*args), fn(*args)
            err = (out.float() - ref.float()).abs().max().item()
            em_ms = triton.testing.do_bench(lambda: em(*args), return_mode="median")
            ex = ember.explain(fn)(*args)
            rows.append({"case": name, "eager_ms": eager_ms, "inductor_ms": ind_ms,
                         "ember_ms": em_ms, "inductor_compile_s": ind_compile,
                         "ember_compile_s": em_compile, "max_abs_err": err,
                         "ember_graphs": ex.graph_count})
    print("| case | eager ms | Inductor ms (x) | ember ms (x) | compile s: Inductor / ember | max err |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['case']} | {r['eager_ms']:.4f} | {r['inductor_ms']:.4f} "
              f"({r['eager_ms'] / r['inductor_ms']:.2f}x) | {r['ember_ms']:.4f} "
              f"({r['eager_ms'] / r['ember_ms']:.2f}x) | {r['inductor_compile_s']:.2f} / "
              f"{r['ember_compile_s']:.2f} | {r['max_abs_err']:.1e} |")
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(
            {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows},
            indent=1))


if __name__ == "__main__":
    main()
