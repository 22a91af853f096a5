#!/usr/bin/env python3
"""Batch-1 latency per backend, and what each call runs on the host (issue 40).

    python3 scripts/latency_probe.py tv_resnet50 BertForMaskedLM --dtype bf16 --batch-size 1 \\
        --backends eager,inductor,inductor-reduce-overhead,ember-capture,ember-capture-reduce-overhead \\
        --json out.json

For each model and backend, in one process (ember.bench's suite and Instance: its batch sizes,
dtype handling and autocast): the median and interquartile range of `--calls` synchronized calls
after warm-up, then one profiled block of `--profiled` calls, whose host events are counted per
call: ATen ops (`aten::copy_` is what a CUDA-graph replay's input copies cost), kernel and copy
launches through the runtime and the driver, graph launches, and ember's ranges (`ember::graph` is
one compiled graph's call). A replayed ember graph should show one graph launch, one input copy
per user input and one clone per output; anything else is work outside the replay.

With EMBER_HOST_STEP_TIMES=1 the ember rows also say what the executor's steps cost on the host
per call, by kind (a generated kernel's launch, an ATen call, a view) and for the whole run
(`host_steps`; src/runtime/host_times.h): the C++ call path's cost per launch.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import time

import torch

from ember import _C
from ember.bench import harness as H
from ember.bench import models as M

LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
            "cudaMemcpyAsync", "cudaMemsetAsync")
GRAPH_LAUNCHES = ("cudaGraphLaunch", "cuGraphLaunch")


def host_counts(prof, calls: int) -> dict:
    """Host events per call by name, and the launches summed."""
    per = collections.Counter()
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            continue
        per[e.name] += 1
    launches = sum(per[n] for n in LAUNCHES) / calls
    graphs = sum(per[n] for n in GRAPH_LAUNCHES) / calls
    aten = {k: v / calls for k, v in per.items() if k.startswith("aten::")}
    return {"launches": launches, "graph_launches": graphs,
            "aten_ops": sum(aten.values()), "copy_": per["aten::copy_"] / calls,
            "ember_graphs": per["ember::graph"] / calls,
            "top": [(k, round(v / calls, 2)) for k, v in per.most_common(12)]}


def device_kernels(prof, calls: int) -> tuple[float, float]:
    """Kernels per call on the device and their summed time (ms)."""
    n = 0
    t = 0.0
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            n += 1
            t += e.device_time
    return n / calls, t / calls / 1e3


def run_one(model: str, backend: str, dtype: str, batch: int, calls: int, profiled: int,
            device: str = "cuda", size: str = "full") -> dict:
    import ember  # noqa: PLC0415

    spec = M.REGISTRY[model]
    wl = spec.build(size, "inference", device, batch)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    compile_fn = None if backend == "eager" else H.resolve_backend(backend)
    torch._dynamo.reset()
    ember.metrics.reset()
    inst = H.Instance(wl.model, wl, "inference", dtype, device, compile_fn)
    t0 = time.perf_counter()
    inst.step()
    sync()
    first = time.perf_counter() - t0
    for _ in range(10):
        inst.step()
    sync()
    times = []
    replays0 = _C.cuda_graph_replays()
    for _ in range(calls):
        t0 = time.perf_counter()
        inst.step()
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    replays = (_C.cuda_graph_replays() - replays0) / calls
    host = []  # the host's part of a call: from its start to its return, the device still busy
    _C.reset_host_step_times()  # counted only for graphs compiled with EMBER_HOST_STEP_TIMES=1
    for _ in range(calls):
        sync()
        t0 = time.perf_counter()
        inst.step()
        host.append((time.perf_counter() - t0) * 1e3)
    sync()
    # Per call: each kind of executor step's count and host us per step (runtime/host_times.h).
    host_steps = {k: {"per_call": v["count"] / calls,
                      "us_each": v["seconds"] * 1e6 / v["count"] if v["count"] else 0.0}
                  for k, v in _C.host_step_times().items() if v["count"]}
    acts = [torch.profiler.ProfilerActivity.CPU]
    if device.startswith("cuda"):
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(profiled):
            inst.step()
        sync()
    q = statistics.quantiles(times, n=4)
    kernels, kernel_ms = device_kernels(prof, profiled)
    counters = ember.metrics.snapshot() if backend.startswith("ember") else {}
    counts = host_counts(prof, profiled)
    row = {"model": model, "backend": backend, "dtype": dtype, "batch": batch,
           "median_ms": statistics.median(times), "q1_ms": q[0], "q3_ms": q[2],
           "host_ms": statistics.median(host),
           "first_call_s": first, "ember_replays_per_call": replays,
           "device_kernels_per_call": kernels, "device_ms_per_call": kernel_ms,
           "graphs": counters.get("graphs"), "graph_breaks": counters.get("graph_breaks"),
           # Attention whose constant causal mask became is_causal (runtime/causal_attention.h).
           "causal_attention": counters.get("causal_attention"),
           "fallback_reasons": counters.get("fallback_reasons", [])[:5],
           "host_us_per_launch": statistics.median(host) * 1e3 / max(
               1.0, counts["launches"] + counts["graph_launches"]),
           "host_steps": host_steps, **counts}
    del inst
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="+")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--backends", default="eager,inductor-reduce-overhead,ember-capture,"
                   "ember-capture-reduce-overhead")
    p.add_argument("--calls", type=int, default=50)
    p.add_argument("--profiled", type=int, default=5)
    p.add_argument("--json", default=None)
    p.add_argument("--device", default="cuda")
    p.add_argument("--size", default="full", help="the suite's size: full or small")
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    rows = []
    for model in a.models:
        for backend in a.backends.split(","):
            try:
                r = run_one(model, backend, a.dtype, a.batch_size, a.calls, a.profiled, a.device,
                            a.size)
            except Exception as err:  # noqa: BLE001 - report and go on with the next
                r = {"model": model, "backend": backend, "error": f"{type(err).__name__}: {err}"[:300]}
            rows.append(r)
            if "error" in r:
                print(f"{model:28s} {backend:32s} ERROR {r['error']}", flush=True)
                continue
            print(f"{model:28s} {backend:32s} {r['median_ms']:8.3f} ms [{r['q1_ms']:.3f}, "
                  f"{r['q3_ms']:.3f}] host {r['host_ms']:.3f} ms ({r['host_us_per_launch']:.1f} us/launch) "
                  f"first {r['first_call_s']:6.1f} s | per call: launches "
                  f"{r['launches']:.0f}, graph launches {r['graph_launches']:.0f}, aten ops "
                  f"{r['aten_ops']:.0f}, copy_ {r['copy_']:.0f}, ember graphs {r['ember_graphs']:.0f}, "
                  f"replays {r['ember_replays_per_call']:.0f}, device kernels "
                  f"{r['device_kernels_per_call']:.0f} ({r['device_ms_per_call']:.3f} ms)", flush=True)
            if backend.startswith("ember"):
                print(f"    graphs {r['graphs']} breaks {r['graph_breaks']} causal {r['causal_attention']} top {r['top'][:8]}",
                      flush=True)
                if r["host_steps"]:
                    print("    host steps per call: " + ", ".join(
                        f"{k} {v['per_call']:.0f} x {v['us_each']:.1f} us"
                        for k, v in r["host_steps"].items()), flush=True)
            if a.json:
                with open(a.json, "w") as f:
                    name = torch.cuda.get_device_name() if a.device.startswith("cuda") else "cpu"
                    # The convolution layouts timed so far (Note [Grouped convolutions by
                    # timing]): what each ember row's graphs were recorded on.
                    json.dump({"torch": torch.__version__, "device": name, "rows": rows,
                               "timed_convolutions": _C.timed_convolutions()}, f, indent=1)


if __name__ == "__main__":
    main()
