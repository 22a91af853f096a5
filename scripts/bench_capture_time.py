"""Capture per model, ember.compile against Dynamo: graphs, graph breaks and capture time.

Dynamo: graphs and breaks from torch._dynamo.explain; capture time is the first call under
torch.compile(backend="eager") (Dynamo's capture and guards, no compiler behind it) minus
eager's first call. ember.compile: graphs, and breaks counted as ember.explain counts them
(graph breaks plus frames run eagerly), from the compile records of its first call; capture
time is the time its interpreter spends tracing the frames (`capture_seconds`; ember's own
compile of the graph, kernels included, is not counted, as Dynamo's eager backend compiles
nothing; the tracer's meta-result cache is emptied before each model). Every model runs in
inference under torch.no_grad().

    python scripts/bench_capture_time.py [--only mlp,nanogpt,...] [--size small|full]
        [--device cpu|cuda] [--json out.json]

Without --only: every model of the suite for --size that builds here (the heavy ones left out).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
import traceback

import torch

import ember
import ember.capture
from ember.bench import models


def first_call(fn, args, kwargs) -> float:
    t0 = time.perf_counter()
    with torch.no_grad():
        fn(*args, **kwargs)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def measure(name: str, size: str, device: str) -> dict:
    wl = models.REGISTRY[name].build(size, "inference", device)
    wl.model.eval()
    eager = min(first_call(wl.model, wl.args, wl.kwargs) for _ in range(3))
    torch._dynamo.reset()
    with torch.no_grad():
        exp = torch._dynamo.explain(wl.model)(*wl.args, **wl.kwargs)
    torch._dynamo.reset()
    dyn = first_call(torch.compile(wl.model, backend="eager"), wl.args, wl.kwargs) - eager
    torch._dynamo.reset()
    if hasattr(ember._C, "clear_meta_cache"):
        ember._C.clear_meta_cache()  # per model: no meta results from the models before it
    before = len(ember.capture.records())
    first_call(ember.compile(wl.model), wl.args, wl.kwargs)
    recs = ember.capture.records()[before:]
    return {
        "model": name,
        "dynamo_graphs": exp.graph_count,
        "dynamo_breaks": exp.graph_break_count,
        "dynamo_capture_s": max(dyn, 1e-6),
        "ember_graphs": sum(1 for r in recs if r["captured"]),
        "ember_breaks": sum(1 for r in recs if r["graph_break"] or not r["captured"]),
        "ember_capture_s": sum(r["capture_seconds"] for r in recs),
        "ember_break_reasons": [r["reason"][:300] for r in recs
                                if r["graph_break"] or not r["captured"]][:5],
    }


def write_json(a: argparse.Namespace, rows: list[dict]) -> None:
    meta = {"date": time.strftime("%Y-%m-%d"), "torch": torch.__version__,
            "python": platform.python_version(), "device": a.device, "size": a.size,
            "cpu": platform.processor() or platform.machine(),
            "gpu": torch.cuda.get_device_name() if a.device.startswith("cuda") else None}
    with open(a.json, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--only", default="")
    p.add_argument("--size", default="small")
    p.add_argument("--device", default="cpu")
    p.add_argument("--json", default="")
    p.add_argument("--skip", default="", help="comma-separated models to leave out")
    a = p.parse_args()
    if a.device == "cpu":
        torch.set_num_threads(2)
    if a.only:
        names = a.only.split(",")
    else:
        names = [s.name for s in models.select() if s.available()]
    names = [n for n in names if n not in a.skip.split(",")]
    rows = []
    print("| model | Dynamo graphs / breaks | ember graphs / breaks | Dynamo capture s | "
          "ember capture s | ratio |")
    print("|---|---|---|---|---|---|")
    for name in names:
        try:
            row = measure(name, a.size, a.device)
        except Exception as e:  # a model that does not build or run here: reported, skipped
            print(f"| {name} | error: {type(e).__name__}: {str(e)[:120]} |||||", flush=True)
            traceback.print_exc()
            continue
        rows.append(row)
        if a.json:
            write_json(a, rows)
        ratio = row["ember_capture_s"] / row["dynamo_capture_s"]
        print(f"| {name} | {row['dynamo_graphs']} / {row['dynamo_breaks']} | "
              f"{row['ember_graphs']} / {row['ember_breaks']} | {row['dynamo_capture_s']:.3f} | "
              f"{row['ember_capture_s']:.3f} | {ratio:.3f}x |", flush=True)
    if rows:
        worse = [r["model"] for r in rows if r["ember_breaks"] > r["dynamo_breaks"]]
        ratios = [r["ember_capture_s"] / r["dynamo_capture_s"] for r in rows]
        geo = math.exp(sum(math.log(max(x, 1e-9)) for x in ratios) / len(ratios))
        print(f"\n{len(rows)} models; more breaks than Dynamo: {worse or 'none'}; capture time "
              f"ember/Dynamo geomean {geo:.3f}x, max {max(ratios):.3f}x")


if __name__ == "__main__":
    main()
