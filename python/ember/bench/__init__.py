"""ember.bench: benchmark harness and model suite, ember side by side with eager and torch.compile.

Function API::

    from ember import bench
    report = bench.run(models=["BertForMaskedLM", "timm"], backends=["eager", "inductor", "ember-capture"],
                       mode="inference", dtype="bf16", device="cuda", suite="full")
    print(report.render_text())
    report.to_json("out.json"); report.save_html("out.html")

CLI: ``python -m ember.bench --help`` (see docs/benchmarks.md).

Every selected model runs under every backend in one process (or one subprocess per model with
``isolate=True``): eager first, then each compiled backend. A backend that fails on a model is reported
as ``fail_to_run`` / ``fail_accuracy`` with its reason; a model whose package is missing is ``skipped``.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Callable, Iterable, Sequence

from . import models
from .harness import DTYPES, MODES, BackendResult, ModelRun, Settings, configure, environment, measure_overhead, run_model
from .models import REGISTRY, ModelSpec, select
from .report import Report

__all__ = ["run", "Report", "ModelRun", "BackendResult", "Settings", "REGISTRY", "ModelSpec", "select", "models",
           "MODES", "DTYPES"]


def _as_list(x: str | Iterable[str] | None) -> list[str] | None:
    if x is None:
        return None
    if isinstance(x, str):
        return [p.strip() for p in x.split(",") if p.strip()]
    return [str(p) for p in x]


class Progress:
    """A one-line progress bar on stderr (one line per step when stderr is not a terminal)."""

    def __init__(self, total: int, enabled: bool = True, stream=None):
        self.total = max(total, 1)
        self.done = 0
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.t0 = time.perf_counter()
        self.label = ""

    def start(self, label: str) -> None:
        self.label = label
        self.show("")

    def show(self, msg: str) -> None:
        if not self.enabled:
            return
        width = 24
        filled = int(width * self.done / self.total)
        el = time.perf_counter() - self.t0
        line = (f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} {int(el) // 60:02d}:{int(el) % 60:02d} "
                f"{self.label} {msg}")
        if self.tty:
            cols = 160
            self.stream.write("\r" + line[:cols].ljust(cols))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def advance(self, msg: str = "") -> None:
        self.done += 1
        self.show(msg)

    def close(self) -> None:
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()


def run(models: str | Sequence[str] | None = None,
        backends: str | Sequence[str] = ("eager", "inductor", "ember-capture"),
        mode: str | Sequence[str] = "inference",
        dtype: str | Sequence[str] = "fp32",
        device: str = "cpu",
        suite: str = "small",
        batch_size: int | None = None,
        repeat: int = 30,
        warmup: int = 5,
        accuracy: bool = True,
        warm_compile: bool = True,
        fresh_cache: bool = True,
        overhead: bool = True,
        tf32: bool = True,
        time_budget_s: float | None = None,
        isolate: bool = False,
        timeout_s: float | None = None,
        exclude: str | Sequence[str] | None = None,
        include_heavy: bool = False,
        progress: bool = True,
        on_result: Callable[[Report], None] | None = None) -> Report:
    """Run the selected models under each backend, for each mode and dtype; return a :class:`Report`.

    models: model names and/or family names (None = the whole suite, without the heavy models).
    backends: "eager" (always included, the baseline), "inductor", "inductor-<torch.compile mode>",
    "ember", or any registered torch.compile backend name.
    on_result: called with the partial report after each model (the CLI saves JSON incrementally).
    """
    modes = _as_list(mode) or ["inference"]
    dtypes = _as_list(dtype) or ["fp32"]
    for m in modes:
        if m not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {m!r}")
    for d in dtypes:
        if d not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {d!r}")
    if suite not in ("small", "full"):
        raise ValueError("suite must be 'small' or 'full'")
    bk = list(dict.fromkeys(["eager", *(_as_list(backends) or [])]))
    specs = select(_as_list(models), _as_list(exclude), include_heavy)
    s = Settings(device=device, suite=suite, backends=tuple(bk), batch_size=batch_size, repeat=repeat,
                 warmup=max(warmup, 2), accuracy=accuracy, warm_compile=warm_compile, fresh_cache=fresh_cache,
                 tf32=tf32, time_budget_s=time_budget_s)
    configure(s)
    meta = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "environment": environment(device),
        "settings": {**s.__dict__, "backends": bk, "modes": modes, "dtypes": dtypes, "isolate": isolate,
                     "timeout_s": timeout_s, "models": [sp.name for sp in specs]},
        "command": " ".join(sys.argv) if sys.argv and sys.argv[0] else None,
    }
    jobs = [(sp, m, d) for m in modes for d in dtypes for sp in specs]
    bar = Progress(len(jobs) + (1 if overhead else 0), enabled=progress)
    t0 = time.perf_counter()
    ov: dict = {}
    if overhead:
        bar.start("overhead")
        ov = measure_overhead([b for b in bk if b != "eager"], device, progress=bar.show)
        bar.advance("done")
    runs: list[ModelRun] = []
    for sp, m, d in jobs:
        bar.start(f"{sp.name} {m}/{d}")
        if time_budget_s is not None and time.perf_counter() - t0 > time_budget_s:
            r = ModelRun(model=sp.name, family=sp.family, suite=suite, mode=m, dtype=d, device=device,
                         status="skipped", note="not started: time budget exhausted")
            r.backends = {b: BackendResult(backend=b) for b in bk}
        elif isolate and sp.available() and not (sp.fp32_only and d != "fp32"):
            r = _run_isolated(sp, m, d, s, timeout_s, bar)
        else:
            r = run_model(sp, m, d, s, progress=bar.show)
        runs.append(r)
        bar.advance(_run_status(r))
        lost = _device_lost(device, r)
        if lost:
            meta["aborted"] = lost
        if on_result is not None:
            meta["wall_s"] = round(time.perf_counter() - t0, 1)
            on_result(Report(meta=meta, overhead=ov, runs=list(runs)))
        if lost:
            # A sticky CUDA error (illegal address, device-side assert) poisons every later model in this
            # process: stop, leaving the rest unrecorded so that a driver can rerun them in a new process.
            bar.show(lost)
            break
    bar.close()
    meta["wall_s"] = round(time.perf_counter() - t0, 1)
    return Report(meta=meta, overhead=ov, runs=runs)


def _device_lost(device: str, r: ModelRun) -> str | None:
    """After a model that failed on CUDA: is the process's CUDA context still usable? None if it is."""
    if not device.startswith("cuda"):
        return None
    if r.status == "ok" and all(x.status != "fail_to_run" for x in r.backends.values()):
        return None
    try:
        import torch

        torch.cuda.synchronize()
        torch.ones(1, device=device).add_(1).item()
        return None
    except Exception as e:  # noqa: BLE001
        from .harness import short_reason

        return f"CUDA context unusable after {r.model} ({r.mode}/{r.dtype}): {short_reason(e)}"


def _run_status(r: ModelRun) -> str:
    if r.status != "ok":
        return f"{r.status}: {r.note or ''}"[:100]
    return " ".join(f"{b}={x.status}" + (f"({x.speedup:.2f}x)" if x.speedup else "") for b, x in r.backends.items())


def _run_isolated(sp: ModelSpec, mode: str, dtype: str, s: Settings, timeout_s: float | None, bar: Progress) -> ModelRun:
    """One model in a subprocess (protects against crashes, device-side asserts and hangs)."""
    with tempfile.TemporaryDirectory(prefix="ember_bench_") as tmp:
        out = os.path.join(tmp, "result.json")
        pkg_python = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        if getattr(sys.modules.get("ember"), "__ember_bench_stub__", False):
            cmd = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "standalone.py")]
        else:
            cmd = [sys.executable, "-m", "ember.bench"]
        cmd += ["--only", sp.name, "--mode", mode, "--dtype", dtype, "--device", s.device, "--suite", s.suite,
                "--backends", ",".join(s.backends), "--repeat", str(s.repeat), "--warmup", str(s.warmup),
                "--json", out, "--quiet", "--no-table", "--worker"]
        if s.batch_size:
            cmd += ["--batch-size", str(s.batch_size)]
        for flag, on in (("--no-accuracy", not s.accuracy), ("--no-warm-compile", not s.warm_compile),
                         ("--no-fresh-cache", not s.fresh_cache), ("--no-tf32", not s.tf32)):
            if on:
                cmd.append(flag)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([pkg_python] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        bar.show("(subprocess)")
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
        except subprocess.TimeoutExpired:
            r = ModelRun(model=sp.name, family=sp.family, suite=s.suite, mode=mode, dtype=dtype, device=s.device,
                         status="timeout", note=f"timed out after {timeout_s:.0f} s")
            r.backends = {b: BackendResult(backend=b, status="not_run") for b in s.backends}
            return r
        if os.path.exists(out):
            rep = Report.load(out)
            if rep.runs:
                return rep.runs[0]
        r = ModelRun(model=sp.name, family=sp.family, suite=s.suite, mode=mode, dtype=dtype, device=s.device,
                     status="crashed", note=f"exit code {proc.returncode}: {proc.stderr.strip()[-400:]}")
        r.backends = {b: BackendResult(backend=b, status="not_run") for b in s.backends}
        return r


def load(path: str) -> Report:
    """Read a JSON report written by ``Report.to_json``."""
    return Report.load(path)


def list_models() -> list[dict]:
    return [{"name": s.name, "family": s.family, "package": s.package, "available": s.available(),
             "heavy": s.heavy, "fp32_only": s.fp32_only, "description": s.description} for s in REGISTRY.values()]


def _dump(obj) -> str:  # pragma: no cover - debugging helper
    return json.dumps(obj, indent=1, default=str)
