"""python -m ember.bench: run the benchmark suite (see docs/benchmarks.md)."""

from __future__ import annotations

import argparse
import sys


EXIT_DEVICE_LOST = 3  # the run stopped after a sticky CUDA error; later models were not recorded


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m ember.bench",
        description="Benchmark eager, ember and torch.compile backends side by side on a model suite.")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1, ... (default: cuda if available, else cpu)")
    p.add_argument("--suite", choices=["small", "full"], default=None,
                   help="model configurations: small (seconds on 2 CPU cores) or full (GPU); default: full on "
                        "cuda, small otherwise")
    p.add_argument("--only", default=None, help="comma-separated model and/or family names (see --list)")
    p.add_argument("--exclude", default=None, help="comma-separated model and/or family names to leave out")
    p.add_argument("--include-heavy", action="store_true", help="also run the >500M-parameter models")
    p.add_argument("--mode", default="inference", help="inference, training, or both comma-separated")
    p.add_argument("--dtype", default="fp32",
                   help="fp32, bf16, fp16 (autocast), bf16-cast, fp16-cast (model cast); comma-separated for several")
    p.add_argument("--batch-size", type=int, default=None, help="override every model's batch size")
    p.add_argument("--repeat", type=int, default=30, help="timed rounds (each round: every backend once)")
    p.add_argument("--warmup", type=int, default=5, help="calls before timing (first two are compile + accuracy)")
    p.add_argument("--backends", default="eager,inductor,ember-capture",
                   help="comma-separated: eager, inductor, inductor-<mode> (e.g. inductor-reduce-overhead), "
                        "ember-capture (ember.compile, the default), ember-capture-<mode>, ember "
                        "(torch.compile(backend='ember')), or any torch.compile backend name")
    p.add_argument("--json", default=None, help="write the JSON report here")
    p.add_argument("--html", default=None, help="write a self-contained HTML report with an SVG speedup chart")
    p.add_argument("--png", default=None, help="write the speedup charts as a PNG (drawn by headless Chromium)")
    p.add_argument("--text", default=None, help="also write the terminal table and summary to this file")
    p.add_argument("--no-accuracy", action="store_true", help="skip the fp64/eager accuracy check")
    p.add_argument("--no-warm-compile", action="store_true", help="skip the warm-cache compile measurement")
    p.add_argument("--no-fresh-cache", action="store_true", help="don't use a fresh Inductor cache dir per model")
    p.add_argument("--no-overhead", action="store_true", help="skip the per-call overhead (tiny graphs) measurement")
    p.add_argument("--no-tf32", action="store_true", help="disable TF32 for fp32 matmul/conv on CUDA (on by default)")
    p.add_argument("--time-budget", type=float, default=None,
                   help="seconds; models not started within the budget are reported as skipped")
    p.add_argument("--isolate", action="store_true", help="one subprocess per model and mode/dtype")
    p.add_argument("--timeout", type=float, default=None, help="per-model timeout in seconds (with --isolate)")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads(N) for CPU runs")
    p.add_argument("--list", action="store_true", help="list the models and exit")
    p.add_argument("--from-json", default=None, help="re-render an existing JSON report (no run)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--no-table", action="store_true", help="don't print the table")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from . import REGISTRY, list_models, run
    from .report import Report

    if args.list:
        for m in list_models():
            flags = ("" if m["available"] else " [package missing]") + (" [heavy]" if m["heavy"] else "") + (
                " [fp32 only]" if m["fp32_only"] else "")
            print(f"{m['name']:36s} {m['family']:16s} {m['description']}{flags}")
        print(f"{len(REGISTRY)} models")
        return 0
    if args.from_json:
        rep = Report.load(args.from_json)
    else:
        import torch

        if args.threads:
            torch.set_num_threads(args.threads)
        device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
        suite = args.suite or ("full" if device.startswith("cuda") else "small")
        rep = run(models=args.only, backends=args.backends, mode=args.mode, dtype=args.dtype, device=device,
                  suite=suite, batch_size=args.batch_size, repeat=args.repeat, warmup=args.warmup,
                  accuracy=not args.no_accuracy, warm_compile=not args.no_warm_compile,
                  fresh_cache=not args.no_fresh_cache, overhead=not args.no_overhead,
                  tf32=not args.no_tf32, time_budget_s=args.time_budget, isolate=args.isolate,
                  timeout_s=args.timeout, exclude=args.exclude, include_heavy=args.include_heavy,
                  progress=not args.quiet, on_result=lambda partial: _save(partial, args))
    text = _save(rep, args)
    if not args.no_table:
        print(text)
    if rep.meta.get("aborted"):
        print(f"ember.bench: stopped early: {rep.meta['aborted']}", file=sys.stderr)
        return EXIT_DEVICE_LOST
    return 0


def _save(rep, args: argparse.Namespace) -> str:
    """Write the JSON / text / HTML outputs (also called after every model, so a killed run keeps its results)."""
    if args.json:
        rep.to_json(args.json)
    text = rep.render_text()
    if args.text:
        with open(args.text, "w") as f:
            f.write(text + "\n")
    if args.html:
        rep.save_html(args.html)
    if args.png:
        rep.save_png(args.png)
    return text


if __name__ == "__main__":
    sys.exit(main())
