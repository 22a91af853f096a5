"""Two ember.compile settings of one model, timed in one process, in alternating rounds.

    python3 scripts/ab_probe.py tv_resnet50 BertForMaskedLM --dtype bf16 --batch-size 1 \
        --b conv1x1_as_mm=1,bias_apart=1 --rounds 12 --calls 10 --json out.json

Session 66 measured on/off settings in separate processes, one after the other, on hosts whose
speed drifted between runs (one setting's run of tv_mobilenet_v2 took 28 us a launch, the other
16): the differences it wanted to see (5-15%) drowned. Here each model is built twice (the same
seed: the same weights), compiled with ember.compile(options=A) and (options=B) (names as in
docs/env_vars.md; `a` defaults to none), warmed up, and then timed in rounds of `--calls`
synchronized calls, A then B in one round and B then A in the next, so that drift reaches both
alike. Prints the median of each, B / A, and the spread of the per-round ratios (min, median,
max); `--json` keeps every round.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from ember.bench import harness as H
from ember.bench import models as M


def parse_options(text: str) -> dict:
    """`name=value,...` as ember.config options: of the option's type where ember.config declares
    it (an integer option's `0` is 0, not False), else 1/0/true/false as flags, numbers or text."""
    from ember import config  # noqa: PLC0415

    out = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, _, value = item.partition("=")
        low = value.lower()
        declared = getattr(config, "_BY_NAME", {}).get(name)
        if declared is not None and declared.type in (int, float, str):
            out[name] = declared.type(value)
        elif low in ("1", "true", "on", ""):
            out[name] = True
        elif low in ("0", "false", "off"):
            out[name] = False
        else:
            try:
                out[name] = int(value)
            except ValueError:
                out[name] = value
    return out


def instance(model: str, options: dict, dtype: str, device: str, batch: int, size: str):
    import ember  # noqa: PLC0415

    torch.manual_seed(0)
    wl = M.REGISTRY[model].build(size, "inference", device, batch)
    compile_fn = lambda m: ember.compile(m, options=options or None)  # noqa: E731
    return H.Instance(wl.model, wl, "inference", dtype, device, compile_fn)


def run_model(model: str, a: dict, b: dict, args) -> dict:
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    insts = {"a": instance(model, a, args.dtype, args.device, args.batch_size, args.size),
             "b": instance(model, b, args.dtype, args.device, args.batch_size, args.size)}
    first_call_s = {}
    for k, inst in insts.items():
        sync()
        t0 = time.perf_counter()
        inst.step()  # the first call: capture, compile and (max-autotune) the templates' timing
        sync()
        first_call_s[k] = time.perf_counter() - t0
        for _ in range(args.warmup):
            inst.step()
    sync()
    times = {"a": [], "b": []}
    ratios = []
    for r in range(args.rounds):
        order = ("a", "b") if r % 2 == 0 else ("b", "a")
        this_round = {}
        for k in order:
            t = []
            for _ in range(args.calls):
                sync()
                t0 = time.perf_counter()
                insts[k].step()
                sync()
                t.append((time.perf_counter() - t0) * 1e3)
            times[k].extend(t)
            this_round[k] = statistics.median(t)
        ratios.append(this_round["b"] / this_round["a"])
    del insts
    if args.device.startswith("cuda"):
        torch.cuda.empty_cache()
    med_a, med_b = statistics.median(times["a"]), statistics.median(times["b"])
    return {"model": model, "a_ms": med_a, "b_ms": med_b, "b_over_a": med_b / med_a,
            "a_first_call_s": first_call_s["a"], "b_first_call_s": first_call_s["b"],
            "round_ratios": ratios, "a_times_ms": times["a"], "b_times_ms": times["b"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="+")
    p.add_argument("--a", default="", help="options of setting A (name=value,...)")
    p.add_argument("--b", required=True, help="options of setting B (name=value,...)")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--calls", type=int, default=10)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--device", default="cuda")
    p.add_argument("--size", default="full", help="the suite's size: full or small")
    p.add_argument("--json")
    args = p.parse_args()
    a, b = parse_options(args.a), parse_options(args.b)
    rows = []
    print(f"A: {a or 'defaults'}  B: {b}", flush=True)
    for model in args.models:
        try:
            row = run_model(model, a, b, args)
        except Exception as e:  # noqa: BLE001 (one model's failure is a row, not the run's end)
            print(f"{model:28s} failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}",
                  flush=True)
            continue
        rows.append(row)
        rr = sorted(row["round_ratios"])
        print(f"{model:28s} A {row['a_ms']:8.3f} ms  B {row['b_ms']:8.3f} ms  B/A "
              f"{row['b_over_a']:.3f}  rounds {rr[0]:.3f} / {statistics.median(rr):.3f} / "
              f"{rr[-1]:.3f}  first call s {row['a_first_call_s']:.1f} / {row['b_first_call_s']:.1f}",
              flush=True)
        if args.json:
            meta = {"torch": torch.__version__, "a": a, "b": b, "dtype": args.dtype,
                    "batch": args.batch_size, "rounds": args.rounds, "calls": args.calls,
                    "device": (torch.cuda.get_device_name() if args.device.startswith("cuda")
                               else "cpu")}
            with open(args.json, "w") as f:
                json.dump({**meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
