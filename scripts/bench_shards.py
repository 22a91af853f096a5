#!/usr/bin/env python3
"""Run ember.bench over several GPUs: one harness process per GPU, then one merged report.

    PYTHONPATH=python python3 scripts/bench_shards.py --gpus 2 --out-dir out --name gpu_bf16 --deadline 540 \\
        --device cuda --suite full --backends eager,inductor --mode inference --dtype bf16 --repeat 20
    python3 scripts/bench_shards.py --merge out/gpu_bf16_merged.json --text t.txt --html r.html  # re-render
    python3 scripts/bench_shards.py --merge out/gpu_bf16_shard*.json --json m.json              # shard files only
    python3 scripts/bench_shards.py --merge first_merged.json rerun_merged.json --json m.json   # re-runs

Every option the driver does not know is passed to the harness (python/ember/bench/standalone.py, which
works without ember's C++ extension), except the ones the driver sets per shard: --only, --json, --text,
--html, --time-budget. Every shard process measures the per-call overhead first (unless --no-overhead): that
also absorbs the process's one-time start-up (CUDA context, Inductor's compile workers), which would
otherwise be counted in its first model's compile time; the merged report keeps shard 0's numbers.

* The selected models (``--only`` / ``--exclude`` / ``--include-heavy``, as the harness selects them) are put
  in priority order: each family's first model, then the families interleaved in proportion to their size
  (``--priority`` moves named models to the front of their family). They are dealt to ``--gpus``
  shards, each model to the shard with the least estimated work so far (equal costs = round robin;
  ``--costs report.json`` uses each model's measured wall time from an earlier report).
* Shard i runs with CUDA_VISIBLE_DEVICES=i, on its own share of the CPU cores (whole physical cores where
  the topology is known; TORCHINDUCTOR_COMPILE_THREADS and OMP_NUM_THREADS set to that share), in its own
  process group, writing ``<name>_shard<i>.json`` (restarts: ``<name>_shard<i>.r<k>.json``) and appending to
  ``<name>_shard<i>.log``. The harness writes its JSON after every model.
* ``--deadline S``: all shards end within S seconds of the driver's start. Each harness gets
  ``--time-budget`` so that it starts no model in the last ``--reserve`` seconds; a shard still running at
  the deadline is killed, its model in flight reported as skipped ("not finished") and the rest as not
  started.
* A shard that exits before finishing its list (crash, CUDA error, OOM kill) has the model in flight
  reported as ``crashed`` (exit code and the log's last error line) and is restarted on the models after
  it, while time is left (``--max-restarts``).
* The merged report (``<name>_merged.json``, plus ``--text`` / ``--html``) uses ember.bench's Report: the
  runs of all shards in the suite's order, the driver's record of every shard attempt in
  ``meta["driver"]`` and nvidia-smi's view of the GPUs in ``meta["gpu_info"]``.
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STANDALONE = os.path.join(ROOT, "python", "ember", "bench", "standalone.py")


def import_bench():
    """ember.bench, with or without ember's C++ extension (like standalone.py)."""
    py = os.path.join(ROOT, "python")
    if py not in sys.path:
        sys.path.insert(0, py)
    spec = importlib.util.spec_from_file_location("_ember_bench_standalone", STANDALONE)
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    mod.install_stub()
    import ember.bench as bench  # noqa: PLC0415

    return bench


# ------------------------------------------------------------------------------------ planning


def priority_order(specs: list, priority: list[str] | None = None) -> list:
    """Every family's first model, then the families interleaved in proportion to their size (a family's k-th
    of n models goes at (k + 0.5) / n).

    Within a family the order is the selection's (the registry's, or --only's), except that names in
    ``priority`` come first, in that order.
    """
    prio = {n: i for i, n in enumerate(priority or [])}
    fams: dict[str, list] = {}
    for i, s in enumerate(specs):
        fams.setdefault(s.family, []).append((prio.get(s.name, len(prio)), i, s))
    keyed = []
    for fi, (_, members) in enumerate(fams.items()):
        members.sort(key=lambda t: (t[0], t[1]))
        n = len(members)
        for k, (_, _, s) in enumerate(members):
            keyed.append((0.0 if k == 0 else (k + 0.5) / n, fi, k, s))
    keyed.sort(key=lambda t: (t[0], t[1], t[2]))
    return [t[3] for t in keyed]


def split_shards(names: list[str], n: int, costs: dict[str, float] | None = None) -> list[list[str]]:
    """Deal the names, in order, each to the shard with the least estimated work so far."""
    n = max(1, n)
    shards: list[list[str]] = [[] for _ in range(n)]
    load = [0.0] * n
    default = 1.0
    if costs:
        vals = sorted(v for v in costs.values() if v and v > 0)
        if vals:
            default = vals[len(vals) // 2]
    for name in names:
        i = min(range(n), key=lambda j: (load[j], j))
        shards[i].append(name)
        c = (costs or {}).get(name)
        load[i] += c if c and c > 0 else default
    return shards


def cpu_groups(n: int) -> list[list[int]]:
    """Split the CPUs this process may use into n shares of whole physical cores (sibling threads together)."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except AttributeError:
        cpus = list(range(os.cpu_count() or 1))
    cores: dict[tuple[str, str], list[int]] = {}
    for c in cpus:
        base = f"/sys/devices/system/cpu/cpu{c}/topology/"
        try:
            with open(base + "core_id") as f:
                core = f.read().strip()
            with open(base + "physical_package_id") as f:
                pkg = f.read().strip()
        except OSError:
            core, pkg = str(c), "0"
        cores.setdefault((pkg, core), []).append(c)
    units = sorted(cores.values())
    if len(units) < n:  # fewer physical cores than shards: share by logical CPU
        units = [[c] for c in cpus]
    if len(units) < n:
        return [cpus for _ in range(n)]
    groups: list[list[int]] = []
    per, extra = divmod(len(units), n)
    k = 0
    for i in range(n):
        take = per + (1 if i < extra else 0)
        groups.append(sorted(c for u in units[k:k + take] for c in u))
        k += take
    return groups


def load_costs(paths: list[str], bench) -> dict[str, float]:
    costs: dict[str, float] = {}
    for p in paths:
        for r in bench.Report.load(p).runs:
            if r.wall_s and r.status != "skipped":
                costs[r.model] = max(costs.get(r.model, 0.0), float(r.wall_s))
    return costs


# Driver options that take a value / are flags; everything else goes to the harness.
DRIVER_OWNED_VALUE = {"--only", "--exclude", "--skip-done", "--json", "--html", "--text", "--time-budget", "--from-json"}
DRIVER_OWNED_FLAG = {"--include-heavy", "--list", "--no-overhead", "--worker"}


def strip_owned(argv: list[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        key = a.split("=", 1)[0]
        if key in DRIVER_OWNED_VALUE:
            i += 1 if "=" in a else 2
            continue
        if a in DRIVER_OWNED_FLAG:
            i += 1
            continue
        out.append(a)
        i += 1
    return out


# ------------------------------------------------------------------------------------- running


class Attempt:
    """One harness process of one shard."""

    def __init__(self, shard: int, k: int, models: list[str], json_path: str, log_path: str, cmd: list[str],
                 budget_s: float, cpus: list[int], gpu: int | None = None):
        self.shard, self.k, self.models = shard, k, models
        self.json_path, self.log_path, self.cmd = json_path, log_path, cmd
        self.budget_s, self.cpus = budget_s, cpus
        self.gpu = shard if gpu is None else gpu
        self.proc: subprocess.Popen | None = None
        self.t_start = 0.0
        self.t_end: float | None = None
        self.rc: int | None = None
        self.killed_at_deadline = False
        self.crashed_model: str | None = None
        self.error: str | None = None
        self.in_flight: list[str] | None = None
        self.log_offset = 0

    def record(self, t0: float) -> dict[str, Any]:
        return {"shard": self.shard, "attempt": self.k, "gpu": self.gpu, "cpus": _ranges(self.cpus),
                "models": self.models, "json": os.path.basename(self.json_path),
                "log": os.path.basename(self.log_path), "time_budget_s": round(self.budget_s, 1),
                "start_s": round(self.t_start - t0, 1),
                "end_s": None if self.t_end is None else round(self.t_end - t0, 1), "rc": self.rc,
                "killed_at_deadline": self.killed_at_deadline, "in_flight": self.in_flight,
                "crashed_model": self.crashed_model, "error": self.error}


def _affinity(cpus: list[int]):
    def pre() -> None:
        try:
            os.sched_setaffinity(0, cpus)
        except OSError:
            pass

    return pre


def _ranges(cpus: list[int]) -> str:
    out, i = [], 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        out.append(str(cpus[i]) if i == j else f"{cpus[i]}-{cpus[j]}")
        i = j + 1
    return ",".join(out)


def done_jobs(path: str) -> set[tuple[str, str, str]]:
    """(model, mode, dtype) of every run in a shard's JSON (possibly half-written or missing)."""
    try:
        with open(path) as f:
            d = json.load(f)
    except (OSError, ValueError):
        return set()
    return {(r["model"], r["mode"], r["dtype"]) for r in d.get("runs", [])}


EXIT_DEVICE_LOST = 3  # ember.bench.__main__.EXIT_DEVICE_LOST


def _aborted(path: str) -> str | None:
    try:
        with open(path) as f:
            return json.load(f).get("meta", {}).get("aborted")
    except (OSError, ValueError):
        return None


def last_error(log_path: str, offset: int = 0, rc: int | None = None, limit: int = 400) -> str:
    """Why a shard process ended: the signal that killed it and/or its log's last error line (only the part
    of the log written after ``offset``, i.e. by this attempt)."""
    why = ""
    if rc is not None and rc < 0:
        try:
            why = f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            why = f"killed by signal {-rc}"
    try:
        with open(log_path, errors="replace") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(offset, size - 20000))
            lines = [ln.strip() for ln in f.read().splitlines() if ln.strip()]
    except OSError:
        lines = []
    pat = re.compile(r"(Error|Exception|error:|Killed|Segmentation|Aborted|CUDA error|terminate|Traceback)")
    found = ""
    for ln in reversed(lines):
        if pat.search(ln) and not ln.startswith(("[", "===")):
            found = ln
            break
    text = "; ".join(x for x in (why, found) if x) or "no error in its log"
    return text[:limit]


def last_progress(log_path: str) -> str:
    try:
        with open(log_path, errors="replace") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 4000))
            lines = [ln.strip() for ln in f.read().splitlines() if ln.strip().startswith(("[#", "[."))]
    except OSError:
        return ""
    return lines[-1][:150] if lines else ""


class Driver:
    def __init__(self, args: argparse.Namespace, harness_args: list[str], bench):
        self.a, self.harness_args, self.bench = args, harness_args, bench
        self.t0 = time.monotonic()
        self.deadline = self.t0 + args.deadline if args.deadline else None
        self.attempts: list[Attempt] = []
        self.running: list[Attempt] = []
        os.makedirs(args.out_dir, exist_ok=True)

    def now(self) -> float:
        return time.monotonic() - self.t0

    def budget_for_start(self) -> float | None:
        if self.deadline is None:
            return None
        return self.deadline - self.a.reserve - time.monotonic() - self.a.startup

    def start(self, shard: int, k: int, models: list[str], cpus: list[int], overhead: bool) -> Attempt | None:
        budget = self.budget_for_start()
        if budget is not None and budget < self.a.min_budget:
            return None
        base = os.path.join(self.a.out_dir, f"{self.a.name}_shard{shard}")
        json_path = base + (".json" if k == 0 else f".r{k}.json")
        cmd = [sys.executable, STANDALONE, *self.harness_args, "--only", ",".join(models), "--json", json_path]
        if budget is not None:
            cmd += ["--time-budget", f"{budget:.0f}"]
        if not overhead:
            cmd.append("--no-overhead")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "python")] +
                                            ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        env["PYTHONUNBUFFERED"] = "1"
        gpu = shard // max(1, self.a.per_gpu)
        if self.a.gpus_visible:
            env["CUDA_VISIBLE_DEVICES"] = str(gpu)
        if self.a.per_gpu > 1:
            env["EMBER_BENCH_GPU_LOCK"] = os.path.abspath(os.path.join(self.a.out_dir, f".gpu{gpu}.lock"))
        if self.a.pin_cpus:
            env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", str(len(cpus)))
            env.setdefault("OMP_NUM_THREADS", str(len(cpus)))
        att = Attempt(shard, k, models, json_path, base + ".log", cmd, budget or 0.0, cpus, gpu)
        log = open(att.log_path, "a")
        att.log_offset = log.tell()
        log.write(f"=== shard {shard} attempt {k} at {self.now():.0f} s: CUDA_VISIBLE_DEVICES="
                  f"{env.get('CUDA_VISIBLE_DEVICES', '')} cpus {_ranges(cpus)}\n=== {shlex.join(cmd)}\n")
        log.flush()
        pre = _affinity(cpus) if (self.a.pin_cpus and cpus and hasattr(os, "sched_setaffinity")) else None
        att.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                                    start_new_session=True, preexec_fn=pre)
        log.close()
        att.t_start = time.monotonic()
        self.attempts.append(att)
        self.running.append(att)
        self.say(f"shard {shard} attempt {k}: {len(models)} models, time budget "
                 f"{'none' if budget is None else f'{budget:.0f} s'}, cpus {_ranges(cpus)}")
        return att

    def say(self, msg: str) -> None:
        print(f"[driver {self.now():5.0f}s] {msg}", flush=True)

    def jobs(self, models: list[str]) -> list[tuple[str, str, str]]:
        modes = [m for m in self.a.mode.split(",") if m]
        dtypes = [d for d in self.a.dtype.split(",") if d]
        return [(n, m, d) for m in modes for d in dtypes for n in models]

    def kill(self, att: Attempt) -> None:
        if att.proc is None or att.proc.poll() is not None:
            return
        done = done_jobs(att.json_path)
        first = next((j for j in self.jobs(att.models) if j not in done), None)
        att.in_flight = list(first) if first else None
        for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(att.proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                att.proc.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                continue

    def finished(self, att: Attempt, cpus: list[int]) -> None:
        """A shard process ended by itself: restart it on what is left if it did not finish its list."""
        att.t_end = time.monotonic()
        att.rc = att.proc.returncode if att.proc else None
        done = done_jobs(att.json_path)
        missing = [j for j in self.jobs(att.models) if j not in done]
        if not missing:
            self.say(f"shard {att.shard} attempt {att.k} done (rc {att.rc}, {att.t_end - att.t_start:.0f} s)")
            return
        if att.rc == EXIT_DEVICE_LOST:  # the harness stopped cleanly after a sticky CUDA error
            att.error = f"device lost: {_aborted(att.json_path) or last_error(att.log_path, att.log_offset, att.rc)}"
            self.say(f"shard {att.shard} attempt {att.k} stopped: {att.error}")
            rest = list(dict.fromkeys(j[0] for j in missing))
        else:
            att.crashed_model = missing[0][0]
            att.error = last_error(att.log_path, att.log_offset, att.rc)
            self.say(f"shard {att.shard} attempt {att.k} ended with rc {att.rc} while running {att.crashed_model}: "
                     f"{att.error}")
            rest = [n for n in dict.fromkeys(j[0] for j in missing) if n != att.crashed_model]
        restarts = sum(1 for x in self.attempts if x.shard == att.shard) - 1
        if not rest:
            return
        if restarts >= self.a.max_restarts:
            self.say(f"shard {att.shard}: no restart left for {len(rest)} models")
            return
        if self.start(att.shard, att.k + 1, rest, cpus, overhead=self.a.overhead) is None:
            self.say(f"shard {att.shard}: too little time left to restart on {len(rest)} models")

    def run(self, shards: list[list[str]]) -> None:
        groups = cpu_groups(len(shards)) if self.a.pin_cpus else [[] for _ in shards]
        for i, models in enumerate(shards):
            if models:
                self.start(i, 0, models, groups[i], overhead=self.a.overhead)
        last_status = time.monotonic()
        try:
            while self.running:
                time.sleep(0.5)
                for att in list(self.running):
                    if att.proc is not None and att.proc.poll() is not None:
                        self.running.remove(att)
                        self.finished(att, groups[att.shard])
                if self.deadline is not None and time.monotonic() >= self.deadline:
                    for att in list(self.running):
                        self.say(f"deadline: killing shard {att.shard} attempt {att.k}")
                        att.killed_at_deadline = True
                        self.kill(att)
                        att.t_end = time.monotonic()
                        att.rc = att.proc.returncode if att.proc else None
                        self.running.remove(att)
                        if att.in_flight:
                            self.say(f"shard {att.shard}: {att.in_flight[0]} was still running "
                                     f"({att.t_end - att.t_start:.0f} s into the attempt)")
                if time.monotonic() - last_status >= self.a.status_every and self.running:
                    last_status = time.monotonic()
                    for att in self.running:
                        n = len(done_jobs(att.json_path))
                        self.say(f"shard {att.shard}: {n}/{len(self.jobs(att.models))} done; "
                                 f"{last_progress(att.log_path)}")
        finally:
            for att in list(self.running):
                att.killed_at_deadline = True
                self.kill(att)
                att.t_end = time.monotonic()
                self.running.remove(att)

    def record(self) -> dict[str, Any]:
        return {"command": shlex.join(sys.argv), "gpus": self.a.gpus, "per_gpu": self.a.per_gpu,
                "deadline_s": self.a.deadline,
                "reserve_s": self.a.reserve, "wall_s": round(self.now(), 1),
                "attempts": [att.record(self.t0) for att in self.attempts]}


# ---------------------------------------------------------------------------------------- merge


def prefer(new, old) -> bool:
    """Whether run `new` (from a later file) replaces `old` of the same model, mode and dtype: a
    run that ran replaces a skipped one, and a later one replaces an earlier unless it was
    skipped (re-runs of models not run, or not finished, before)."""
    return new.status != "skipped" or old.status == "skipped"


def merge_reports(bench, paths: list[str]):
    """One Report from whole reports (merged driver reports or harness reports), in file order:
    each model's run chosen by prefer(); meta from the first, with the sources listed."""
    reports = [bench.Report.load(p) for p in paths]
    best: dict[tuple[str, str, str], Any] = {}
    source: dict[tuple[str, str, str], str] = {}
    for path, rep in zip(paths, reports):
        for r in rep.runs:
            key = (r.model, r.mode, r.dtype)
            if key not in best or prefer(r, best[key]):
                best[key], source[key] = r, os.path.basename(path)
    out = reports[0]
    order = {n: i for i, n in enumerate(bench.REGISTRY)}
    out.runs = sorted(best.values(), key=lambda r: (order.get(r.model, len(order)), r.mode, r.dtype))
    out.meta.setdefault("merge", {})["source"] = {"/".join(k): v for k, v in source.items()}
    return out


def merge(bench, attempts: list[dict[str, Any]], out_dir: str, order: list[str] | None = None,
          backends: list[str] | None = None, extra_meta: dict | None = None):
    """One Report from the shard attempts; models that never reported get a run saying why."""
    from ember.bench.harness import BackendResult, ModelRun  # noqa: PLC0415

    reports, synthetic = [], []
    best: dict[tuple[str, str, str], tuple[int, Any]] = {}  # key -> (report index, run)
    for att in attempts:
        path = os.path.join(out_dir, att["json"])
        rep = bench.Report.load(path) if os.path.exists(path) else None
        if rep is not None:
            for r in rep.runs:
                key = (r.model, r.mode, r.dtype)
                if key not in best or prefer(r, best[key][1]):
                    best[key] = (len(reports), r)
            reports.append(rep)
    for i, rep in enumerate(reports):
        rep.runs = [r for r in rep.runs if best[(r.model, r.mode, r.dtype)] == (i, r)]
    seen: set[tuple[str, str, str]] = set(best)
    # what each attempt was given but did not report
    settings = reports[0].meta.get("settings", {}) if reports else {}
    modes = settings.get("modes") or ["inference"]
    dtypes = settings.get("dtypes") or ["fp32"]
    bks = backends or settings.get("backends") or ["eager"]
    family = {n: s.family for n, s in bench.REGISTRY.items()}
    for att in attempts:
        for m in modes:
            for d in dtypes:
                for n in att["models"]:
                    key = (n, m, d)
                    if key in seen:
                        continue
                    if att.get("crashed_model") == n:
                        status = "crashed"
                        note = (f"shard process exited with code {att.get('rc')} while running this model: "
                                f"{att.get('error') or '?'}")
                    elif any(a["shard"] == att["shard"] and a["attempt"] > att["attempt"] and n in a["models"]
                             for a in attempts):
                        continue  # handed to the restarted shard
                    elif list(att.get("in_flight") or []) == [n, m, d]:
                        status, note = "skipped", (att.get("in_flight_note")
                                                   or "not finished: still running at the driver's deadline (killed)")
                    else:
                        status, note = "skipped", "not started: driver deadline"
                    r = ModelRun(model=n, family=family.get(n, "?"), suite=settings.get("suite", "?"), mode=m,
                                 dtype=d, device=settings.get("device", "?"), status=status, note=note)
                    r.backends = {b: BackendResult(backend=b) for b in bks}
                    seen.add(key)
                    synthetic.append(r)
    rep = bench.Report.merge(reports) if reports else bench.Report(meta={}, overhead={}, runs=[])
    rep.runs = rep.runs + synthetic
    if order:
        idx = {n: i for i, n in enumerate(order)}
        groups = [(m, d) for m in modes for d in dtypes]
        gidx = {g: i for i, g in enumerate(groups)}
        rep.runs.sort(key=lambda r: (gidx.get((r.mode, r.dtype), len(groups)), idx.get(r.model, len(idx))))
        rep.meta.setdefault("settings", {})["models"] = [n for n in order if any(r.model == n for r in rep.runs)]
    if extra_meta:
        rep.meta.update(extra_meta)
    return rep


def attempts_from_files(paths: list[str]) -> list[dict[str, Any]]:
    """Reconstruct shard attempts from shard JSON files alone (when the driver's record is missing)."""
    pat = re.compile(r"_shard(\d+)(?:\.r(\d+))?\.json$")
    out = []
    for p in paths:
        m = pat.search(p)
        shard, k = (int(m.group(1)), int(m.group(2) or 0)) if m else (len(out), 0)
        with open(p) as f:
            d = json.load(f)
        models = (d.get("meta", {}).get("settings") or {}).get("models") or [r["model"] for r in d.get("runs", [])]
        done = {(r["model"], r["mode"], r["dtype"]) for r in d.get("runs", [])}
        st = d.get("meta", {}).get("settings") or {}
        jobs = [(n, mo, dt) for mo in st.get("modes") or ["inference"] for dt in st.get("dtypes") or ["fp32"]
                for n in models]
        first = next((j for j in jobs if j not in done), None)
        out.append({"shard": shard, "attempt": k, "json": os.path.basename(p), "models": models, "rc": None,
                    "crashed_model": None, "error": None, "in_flight": list(first) if first else None,
                    "in_flight_note": "not finished: the shard ended while running it (killed at the deadline or "
                                      "crashed; no driver record, see the shard log)",
                    "_json_path": p})
    out.sort(key=lambda a: (a["shard"], a["attempt"]))
    return out


def gpu_info() -> str | None:
    try:
        p = subprocess.run(["nvidia-smi", "--query-gpu=index,name,driver_version,memory.total,clocks.max.sm,"
                            "clocks.sm,temperature.gpu,power.limit,persistence_mode", "--format=csv"],
                           capture_output=True, text=True, timeout=30)
        return p.stdout.strip() if p.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def write_outputs(rep, args: argparse.Namespace, json_path: str | None) -> None:
    if json_path:
        rep.to_json(json_path)
    if getattr(args, "text", None):
        with open(args.text, "w") as f:
            f.write(rep.render_text() + "\n")
    if getattr(args, "html", None):
        rep.save_html(args.html)


def print_summary(rep) -> None:
    print("\n".join(["summary:", *rep.summary_lines()]))
    fails = rep.failures()
    if fails:
        print("failures:")
        for f in fails:
            print(f"  {f['model']} {f['mode']}/{f['dtype']} {f['backend']} {f['status']}@{f['phase'] or 'accuracy'}: "
                  f"{(f['reason'] or '')[:200]}")
    other = [r for r in rep.runs if r.status not in ("ok", "skipped")]
    for r in other:
        print(f"  {r.model} {r.mode}/{r.dtype}: {r.status}: {(r.note or '')[:200]}")


# ------------------------------------------------------------------------------------------ CLI


def parse(argv: list[str] | None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    p.add_argument("--gpus", type=int, default=1, help="number of shards, one process per GPU (CUDA_VISIBLE_DEVICES=i)")
    p.add_argument("--per-gpu", type=int, default=1,
                   help="harness processes per GPU (default 1); with more, each GPU's processes take turns on it "
                        "(EMBER_BENCH_GPU_LOCK) for everything but compiles, which overlap on their own CPUs")
    p.add_argument("--out-dir", default="bench_out", help="where shard JSONs, logs and the merged report go")
    p.add_argument("--name", default="bench", help="file prefix: <name>_shard<i>.json, <name>_merged.json")
    p.add_argument("--deadline", type=float, default=None, help="seconds from start by which every shard has ended")
    p.add_argument("--reserve", type=float, default=60.0,
                   help="no model is started in the last RESERVE seconds before the deadline (default 60)")
    p.add_argument("--startup", type=float, default=10.0, help="estimated harness start-up seconds (default 10)")
    p.add_argument("--min-budget", type=float, default=20.0, help="don't (re)start a shard with less time than this")
    p.add_argument("--max-restarts", type=int, default=2, help="restarts per shard after a crash (default 2)")
    p.add_argument("--priority", default=None, help="comma-separated models to put first within their family")
    p.add_argument("--costs", default=None, help="comma-separated earlier report JSONs: balance shards by wall time")
    p.add_argument("--no-pin-cpus", dest="pin_cpus", action="store_false",
                   help="don't give each shard its own share of the CPU cores")
    p.add_argument("--no-gpu-split", dest="gpus_visible", action="store_false",
                   help="don't set CUDA_VISIBLE_DEVICES per shard")
    p.add_argument("--status-every", type=float, default=60.0, help="seconds between progress lines")
    p.add_argument("--dry-run", action="store_true", help="print the shards and commands, run nothing")
    p.add_argument("--merge", nargs="+", default=None,
                   help="no run: merge these JSONs (a driver's <name>_merged.json, or shard JSONs)")
    # harness options the driver itself needs (the rest are passed through)
    p.add_argument("--only", default=None)
    p.add_argument("--exclude", default=None)
    p.add_argument("--skip-done", default=None,
                   help="comma-separated earlier report JSONs (globs): leave out the models they ran "
                        "in this --mode and --dtype (a sweep continued over several calls)")
    p.add_argument("--include-heavy", action="store_true")
    p.add_argument("--mode", default="inference")
    p.add_argument("--dtype", default="fp32")
    p.add_argument("--backends", default="eager,inductor,ember-capture")
    p.add_argument("--no-overhead", dest="overhead", action="store_false",
                   help="no per-call overhead measurement (by default every shard process measures it first, which "
                        "also keeps one-time process start-up out of its first model's compile time)")
    p.add_argument("--json", default=None, help="merged JSON (default <out-dir>/<name>_merged.json)")
    p.add_argument("--text", default=None, help="merged text table + summary")
    p.add_argument("--html", default=None, help="merged HTML report")
    return p.parse_known_args(argv)


def main(argv: list[str] | None = None) -> int:
    args, rest = parse(argv)
    argv = list(sys.argv[1:] if argv is None else argv)
    bench = import_bench()

    if args.merge:
        # In the order given (a later file's run of a model replaces an earlier one); a glob's
        # matches sorted among themselves; each file once.
        files = list(dict.fromkeys(f for pat in args.merge for f in (sorted(glob.glob(pat)) or [pat])))
        drivers = []
        for f in files:
            with open(f) as fh:
                d = json.load(fh)
            if "driver" in d.get("meta", {}):
                drivers.append(f)
        if drivers and len(files) == 1:
            rep = bench.Report.load(files[0])
        elif drivers:  # several whole reports (earlier runs and re-runs of what they left)
            rep = merge_reports(bench, files)
        else:
            atts = attempts_from_files([f for f in files if f not in drivers])
            order = list(bench.REGISTRY)
            rep = merge(bench, atts, os.path.dirname(atts[0]["_json_path"]) if atts else ".", order=order)
        write_outputs(rep, args, args.json)
        print_summary(rep)
        return 0

    # the harness validates its own options; check them here before starting processes
    from ember.bench.__main__ import parse_args as harness_parse  # noqa: PLC0415

    harness_args = strip_owned(argv)
    for opt in ("--gpus", "--per-gpu", "--out-dir", "--name", "--deadline", "--reserve", "--startup", "--min-budget",
                "--max-restarts", "--priority", "--costs", "--no-pin-cpus", "--no-gpu-split", "--status-every",
                "--dry-run", "--merge"):
        harness_args = _drop(harness_args, opt)
    harness_parse(harness_args)
    exclude = (_list(args.exclude) or []) + sorted(done_models(_list(args.skip_done) or [], args.mode,
                                                               args.dtype))
    specs = bench.select(_list(args.only), exclude or None, args.include_heavy)
    ordered = priority_order(specs, _list(args.priority))
    costs = load_costs(_list(args.costs) or [], bench) if args.costs else None
    n_shards = args.gpus * max(1, args.per_gpu)
    shards = split_shards([s.name for s in ordered], n_shards, costs)
    suite_order = [s.name for s in specs]
    print(f"[driver] {len(specs)} models in {n_shards} shards; priority order: {', '.join(s.name for s in ordered)}")
    for i, sh in enumerate(shards):
        print(f"[driver] shard {i} ({len(sh)}): {', '.join(sh)}")
    if args.dry_run:
        print("[driver] harness arguments:", shlex.join(harness_args))
        return 0

    info = gpu_info()
    if info:
        print(info)
    drv = Driver(args, harness_args, bench)
    drv.run(shards)
    record = drv.record()
    atts = record["attempts"]
    rep = merge(bench, atts, args.out_dir, order=suite_order, backends=_list(args.backends),
                extra_meta={"driver": record, "gpu_info": info, "priority_order": [s.name for s in ordered]})
    json_path = args.json or os.path.join(args.out_dir, f"{args.name}_merged.json")
    write_outputs(rep, args, json_path)
    print_summary(rep)
    print(f"[driver] merged report: {json_path} ({drv.now():.0f} s)")
    return 0


def _drop(argv: list[str], opt: str) -> list[str]:
    takes_value = opt not in ("--no-pin-cpus", "--no-gpu-split", "--dry-run")
    out, i = [], 0
    while i < len(argv):
        a = argv[i]
        if a == opt:
            i += 2 if takes_value else 1
            if opt == "--merge":
                while i < len(argv) and not argv[i].startswith("--"):
                    i += 1
            continue
        if a.startswith(opt + "="):
            i += 1
            continue
        out.append(a)
        i += 1
    return out


def done_models(patterns: list[str], mode: str, dtype: str) -> set[str]:
    """Models with a run that was not skipped, in this mode and dtype, in the reports matching
    `patterns` (merged driver reports, shard reports or harness reports)."""
    done: set[str] = set()
    for f in sorted({f for pat in patterns for f in glob.glob(pat)}):
        with open(f) as fh:
            d = json.load(fh)
        for r in d.get("runs", []):
            if r.get("mode") == mode and r.get("dtype") == dtype and r.get("status") != "skipped":
                done.add(r["model"])
    return done


def _list(x: str | None) -> list[str] | None:
    if not x:
        return None
    return [p.strip() for p in x.split(",") if p.strip()]


if __name__ == "__main__":
    sys.exit(main())
