"""Zoo sweep: every model architecture that builds offline, under ember.compile and under Dynamo.

Each model (scripts/zoo_models.py: transformers classes with generic tiny configs, timm,
torchvision; random weights, no downloads) runs in its own subprocess with a timeout, in
inference under torch.no_grad(): eager, then Dynamo (torch.compile with a counting backend that
returns the FX graph's forward, as backend="eager" does), torch._dynamo.reset(), then
ember.compile; three calls each (calls 2 and 3 with cloned inputs, same values). Per model:

- correct: every tensor of each call's output pytree (dicts, ModelOutputs, lists, tuples; cache
  objects and other non-tensor leaves skipped) matches eager's call within rtol=atol=1e-3 (fp32;
  5e-2 for bf16), or, where it does not, passes the harness's fp64 check (the backend's rmse
  against an fp64 copy of the model at most 2x eager's, 3x for small outputs, + tol/10); max abs
  error kept; separately for ember and Dynamo. Eager runs twice: a model
  whose eager outputs differ between calls is not judged (correct = None).
- graphs and breaks of call 1. ember: from ember.capture.records(), graphs = records with
  captured, breaks = records with graph_break or not captured (as bench_capture_time.py and
  ember.explain count). Dynamo: graphs = calls of the counting backend; breaks = the sum of
  torch._dynamo.utils.counters["graph_break"] (both robust in torch 2.11 and 2.13).
- recompiles on calls 2 and 3: ember = new records (one per frame compile); Dynamo = new frame
  compiles (counters["frames"]["total"]); Dynamo's new graphs too. First reasons: ember's from
  its logger (EMBER_LOGS=recompiles), Dynamo's from torch._dynamo.utils.guard_failures.
- capture time: ember = the call-1 records' capture_seconds (its interpreter; kernel compiles not
  counted); Dynamo = its first call minus eager's (best of the eager calls); first-call times.
- status: ok (both ran; correctness is a field), skipped (inputs this sweep does not make),
  construct_failed, eager_failed, ember_error, dynamo_error, both_error (both raised: most
  likely the model's own compile path), timeout (the stage it was in), crashed (the signal),
  worker_failed.

The markdown report has a summary, a table of every exception (a failed status, a wrong result,
more breaks or recompiles than Dynamo), the reasons grouped by kind (each model's first ember
break and recompile, every break, errors, construct failures) and the per-model table.


    python scripts/zoo_sweep.py --family transformers [--only A,B] [--limit N] [--shard i/n]
        [--jobs N] [--timeout S] [--device cpu|cuda] [--dtype fp32|bf16] --json out.json
        [--resume] [--markdown docs/zoo_sweep_<date>.md]
    python scripts/zoo_sweep.py --family timm --list            # names only, builds nothing
    python scripts/zoo_sweep.py --merge a.json b.json --json all.json --markdown out.md
    python scripts/zoo_sweep.py --family transformers --repro MambaForCausalLM  # logs, per call

--shard i/n (0-based) takes every n-th model from the i-th. --resume keeps the rows of --json and
skips their models. Rows are written to --json as they come, so a killed sweep keeps them.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import os
import platform
import re
import signal
import subprocess
import sys
import threading
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
MARK = "ZOO_ROW "


def short(s: Any, n: int = 300) -> str:
    s = " ".join(str(s).split())
    return s if len(s) <= n else s[:n - 3] + "..."


SITE = re.compile(r"/\S*?/(?:site-packages|lib/python3\.\d+)/")


def clean(s: Any) -> str:
    """A reason without install paths, and with a traceback cut to its last line."""
    s = str(s)
    head, tb, rest = s.partition("Traceback (most recent call last):")
    if tb:  # the exception line, if the traceback was not cut before it
        exc = re.findall(r"\b([A-Z]\w*(?:Error|Exception)\b:? .*?)(?= File \"|$)", rest.strip())
        s = head + (exc[-1] if exc else "(traceback cut)")
    return SITE.sub("", s)


def kind(s: str) -> str:
    """What a reason says, without where: the frame, the source location, names of the guard."""
    s = clean(s)
    s = re.sub(r"^\S+:\d+ \([^)]*\): ", "", s)                   # "file:line (qualname): "
    s = re.sub(r" at \S+:\d+ \(.*$", "", s)                      # " at file:line (fn) <- ..."
    s = re.sub(r"^ember: recompiling (\S+) \(\S+\): ", r"recompiling \1: ", s)
    s = re.sub(r"(==|failed \(now) '[^']*'", r"\1 '…'", s)       # guard values
    s = re.sub(r"'\w+(Config|Output\w*)'", r"'…\1'", s)          # 'BartConfig' object ...

    return short(s, 140)


# ---- the worker: one model, in its own process ------------------------------------------------

def tensors_of(out: Any, depth: int = 0) -> list:
    """The tensors of an output pytree: dicts (ModelOutput), lists, tuples, and transformers'
    cache objects (their attributes: layers, keys, values); other leaves skipped."""
    import torch
    if isinstance(out, torch.Tensor):
        return [out]
    if depth > 6:
        return []
    if isinstance(out, dict):
        return [t for v in out.values() for t in tensors_of(v, depth + 1)]
    if isinstance(out, (list, tuple)):
        return [t for v in out for t in tensors_of(v, depth + 1)]
    if type(out).__module__.endswith("cache_utils") and hasattr(out, "__dict__"):
        return [t for k, v in sorted(vars(out).items()) for t in tensors_of(v, depth + 1)]
    return []


def compare(ref: list, got: list, tol: float) -> tuple[bool, float, str]:
    """(all close, max abs error, what differs)."""
    import torch
    if len(ref) != len(got):
        return False, math.inf, f"{len(got)} output tensors, eager has {len(ref)}"
    worst = 0.0
    for i, (a, b) in enumerate(zip(ref, got)):
        if a.shape != b.shape or a.dtype != b.dtype:
            return (False, math.inf,
                    f"tensor {i}: {b.dtype}{list(b.shape)}, eager {a.dtype}{list(a.shape)}")
        if a.numel() == 0:
            continue
        if not a.is_floating_point() and not a.is_complex():
            if not torch.equal(a, b):
                return False, math.inf, f"tensor {i} ({a.dtype}) differs"
            continue
        a, b = a.detach().double(), b.detach().double()
        finite = torch.isfinite(a)
        if not torch.equal(finite, torch.isfinite(b)) or not torch.equal(a[~finite], b[~finite]):
            return False, math.inf, f"tensor {i}: inf/nan differ"
        err = (a[finite] - b[finite]).abs()
        if err.numel():
            worst = max(worst, err.max().item())
            if not bool((err <= tol + tol * a[finite].abs()).all()):
                return False, worst, f"tensor {i}{list(a.shape)}: max abs err {worst:.3g}"
    return True, worst, ""


def rmse_ok(ref: list, got: list, f64: list, tol: float) -> bool:
    """The harness's fallback check (torch._dynamo.utils.same): where outputs are not allclose,
    the backend's error against an fp64 run is at most k times eager's (+ tol / 10): deep random
    networks (ResNet-152, HRNet at random init) reach magnitudes where float32 rounding and
    TF32 convolutions differ by more than an absolute tolerance."""
    import torch
    for a, b, f in zip(ref, got, f64):
        if not a.is_floating_point() or a.shape != f.shape:
            continue
        a, b, f = a.double(), b.double(), f.double().to(a.device)
        finite = torch.isfinite(a) & torch.isfinite(b) & torch.isfinite(f)
        if not bool(finite.any()):
            continue
        ref_err = torch.sqrt(torch.mean(torch.square((f - a)[finite]))).item()
        res_err = torch.sqrt(torch.mean(torch.square((f - b)[finite]))).item()
        mult = 3.0 if tol >= 2e-2 or a.numel() < 1000 else 2.0
        if res_err > mult * ref_err + tol / 10:
            return False
    return True


def worker(a: argparse.Namespace) -> None:
    import logging
    import torch
    torch.set_num_threads(a.threads)
    sys.path.insert(0, HERE)
    import zoo_models
    row: dict[str, Any] = {"model": a.worker, "family": a.family, "status": "running",
                           "stage": "build"}

    def emit() -> None:
        print(MARK + json.dumps(row), flush=True)

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[a.dtype]
    tol = 1e-3 if a.dtype == "fp32" else 5e-2
    emit()
    try:
        wl = zoo_models.build(a.family, a.worker, a.device, dtype, image_cap=a.image_cap)
    except zoo_models.Skip as e:
        row.update(status="skipped", reason=short(e))
        return emit()
    except Exception as e:
        row.update(status="construct_failed", reason=short(clean(f"{type(e).__name__}: {e}"), 600))
        return emit()
    row["info"] = wl.info

    def sync() -> None:
        if a.device.startswith("cuda"):
            torch.cuda.synchronize()

    def clone(x: Any) -> Any:
        return torch.utils._pytree.tree_map(
            lambda t: t.clone() if isinstance(t, torch.Tensor) else t, x)

    def call(fn: Any, i: int) -> tuple[list, float]:
        args, kwargs = (wl.args, wl.kwargs) if i == 0 else (clone(wl.args), clone(wl.kwargs))
        torch.manual_seed(0)
        t0 = time.perf_counter()
        with torch.no_grad():
            out = fn(*args, **kwargs)
        sync()
        return [t.detach().clone() for t in tensors_of(out)], time.perf_counter() - t0

    row["stage"] = "eager"
    try:
        runs = [call(wl.model, i) for i in range(3)]
    except Exception as e:
        row.update(status="eager_failed", reason=short(clean(f"{type(e).__name__}: {e}"), 600))
        return emit()
    ref = runs[0][0]
    eager_s = min(t for _, t in runs)
    deterministic = compare(ref, runs[1][0], tol)[0]
    row.update(eager_s=eager_s, deterministic=deterministic, outputs=len(ref))
    if not ref:
        row["deterministic"] = deterministic = False  # nothing to compare

    f64_cache: list = []

    def fp64_outputs() -> list | None:
        """Outputs of an fp64 copy of the model (made once, when a comparison first fails)."""
        if not f64_cache:
            import copy
            try:
                to64 = (lambda t: t.double() if isinstance(t, torch.Tensor) and t.is_floating_point()
                        else t)
                m64 = copy.deepcopy(wl.model).double()
                args = torch.utils._pytree.tree_map(to64, clone(wl.args))
                kwargs = torch.utils._pytree.tree_map(to64, clone(wl.kwargs))
                torch.manual_seed(0)
                with torch.no_grad():
                    f64_cache.append([t.detach() for t in tensors_of(m64(*args, **kwargs))])
            except Exception:
                f64_cache.append(None)
        return f64_cache[0]

    def judge(prefix: str, outs: list) -> None:
        oks, errs, why = [], [], ""
        for o in outs:
            ok, err, w = compare(ref, o, tol)
            if not ok and err < math.inf:
                f64 = fp64_outputs()
                if f64 is not None and len(f64) == len(ref) and rmse_ok(ref, o, f64, tol):
                    ok, w = True, ""
                    row[f"{prefix}_by_fp64"] = True  # passed by the fp64 rmse check
            oks.append(ok)
            errs.append(err)
            why = why or w
        row[f"{prefix}_correct"] = all(oks) if deterministic else None
        row[f"{prefix}_max_err"] = max(errs) if max(errs) < math.inf else None  # shapes differ

        if why:
            row[f"{prefix}_mismatch"] = why

    # Dynamo: a counting backend around the FX graph's forward (what backend="eager" runs)
    import torch._dynamo
    from torch._dynamo.utils import counters, guard_failures
    row["stage"] = "dynamo"
    emit()
    n_graphs = [0]

    def counting(gm: Any, example_inputs: Any) -> Any:
        n_graphs[0] += 1
        return gm.forward

    def breaks() -> int:
        return sum(counters["graph_break"].values())

    torch._dynamo.reset()
    counters.clear()
    try:
        compiled = torch.compile(wl.model, backend=counting)
        out1, t1 = call(compiled, 0)
        g1, b1, f1 = n_graphs[0], breaks(), counters["frames"]["total"]
        fails = {k: len(v) for k, v in guard_failures.items()}
        outs, per_call = [out1], []
        for i in (1, 2):
            f = counters["frames"]["total"]
            outs.append(call(compiled, i)[0])
            per_call.append(counters["frames"]["total"] - f)
        row.update(dynamo_graphs=g1, dynamo_breaks=b1, dynamo_first_s=t1,
                   dynamo_capture_s=max(t1 - eager_s, 1e-6),
                   dynamo_recompiles=sum(per_call), dynamo_recompiles_per_call=per_call,
                   dynamo_new_graphs=n_graphs[0] - g1,
                   dynamo_break_reasons=[short(k.splitlines()[0] if k else k, 200)
                                         for k in list(counters["graph_break"])[:5]],
                   dynamo_recompile_reasons=[short(r, 300) for k, v in guard_failures.items()
                                             for r in v[fails.get(k, 0):]][:3])
        judge("dynamo", outs)
    except Exception as e:
        row.update(dynamo_error=short(clean(f"{type(e).__name__}: {e}"), 600))
    compiled = None
    torch._dynamo.reset()

    # ember.compile
    row["stage"] = "ember"
    emit()
    import warnings
    logged: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            logged.append(record.getMessage())

    logging.getLogger("ember").addHandler(Keep())
    try:
        import ember
        import ember.capture
        before = len(ember.capture.records())
        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always")
            compiled = ember.compile(wl.model)
            out1, t1 = call(compiled, 0)
            recs = ember.capture.records()[before:]
            mid = len(ember.capture.records())
            n_logged = len(logged)
            outs, per_call = [out1], []
            for i in (1, 2):
                n = len(ember.capture.records())
                outs.append(call(compiled, i)[0])
                per_call.append(len(ember.capture.records()) - n)
        new = ember.capture.records()[mid:]
        row.update(ember_graphs=sum(1 for r in recs if r["captured"]),
                   ember_breaks=sum(1 for r in recs if r["graph_break"] or not r["captured"]),
                   ember_capture_s=sum(r["capture_seconds"] for r in recs),
                   ember_compile_s=sum(r["seconds"] for r in recs), ember_first_s=t1,
                   ember_recompiles=len(new), ember_recompiles_per_call=per_call,
                   ember_break_reasons=[short(clean(f"{r['code']}: {r['reason']}"), 400)
                                        for r in recs if r["graph_break"] or not r["captured"]][:8],
                   ember_recompile_reasons=[short(clean(m), 400) for m in logged[n_logged:]
                                            if "recompil" in m][:3],
                   ember_warnings=[short(w.message, 300) for w in warned
                                   if "ember" in str(w.message).lower()][:3])
        if new and not row["ember_recompile_reasons"]:
            row["ember_recompile_reasons"] = [short(clean(f"{r['code']}: {r['reason']}"), 300)
                                              for r in new[:3]]
        judge("ember", outs)
    except Exception as e:
        row.update(ember_error=short(clean(f"{type(e).__name__}: {e}"), 600))
    row["status"] = status_of(row)
    row.pop("stage")
    emit()


def status_of(row: dict) -> str:
    """ok, or which of the compilers raised (both: most likely the model's own compile path)."""
    if "ember_error" in row:
        return "both_error" if "dynamo_error" in row else "ember_error"
    return "dynamo_error" if "dynamo_error" in row else "ok"


# ---- the parent: subprocesses, rows, reports --------------------------------------------------

def run_one(a: argparse.Namespace, family: str, name: str) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", name, "--family", family,
           "--device", a.device, "--dtype", a.dtype, "--threads", str(a.threads),
           "--image-cap", str(a.image_cap)]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false")
    env["EMBER_LOGS"] = ",".join(x for x in (env.get("EMBER_LOGS"), "recompiles") if x)
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         start_new_session=True)
    timed_out = False
    try:
        out, err = p.communicate(timeout=a.timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(p.pid, signal.SIGKILL)  # the worker and what it started (g++)
        out, err = p.communicate()
    lines = [ln[len(MARK):] for ln in out.splitlines() if ln.startswith(MARK)]
    row = json.loads(lines[-1]) if lines else {"model": name, "family": family, "stage": "start"}
    if timed_out:
        row.update(status="timeout", reason=f"over {a.timeout} s in stage {row.get('stage')}")
    elif p.returncode < 0:
        sig = signal.Signals(-p.returncode).name
        last = err.strip().splitlines()[-1] if err.strip() else ""
        row.update(status="crashed", reason=short(f"{sig} in stage {row.get('stage')}: {last}"))
    elif row.get("status") in (None, "running"):
        row.update(status="worker_failed",
                   reason=short(clean(f"exit {p.returncode}: {err.strip()[-2000:]}"), 600))
    row["wall_s"] = round(time.perf_counter() - t0, 2)
    return row


def meta(a: argparse.Namespace) -> dict:
    import torch
    m = {"date": time.strftime("%Y-%m-%d"), "torch": torch.__version__,
         "python": platform.python_version(), "device": a.device, "dtype": a.dtype,
         "threads": a.threads, "timeout": a.timeout, "command": " ".join(sys.argv)}
    for pkg in ("transformers", "timm", "torchvision"):
        try:
            m[pkg] = __import__(pkg).__version__
        except Exception:
            m[pkg] = None
    if a.device.startswith("cuda"):
        m["gpu"] = torch.cuda.get_device_name()
    return m


def write_json(path: str, m: dict, rows: list[dict]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"meta": m, "rows": rows}, f, indent=1)
    os.replace(tmp, path)


def select(a: argparse.Namespace) -> list[tuple[str, str]]:
    sys.path.insert(0, HERE)
    import zoo_models
    families = zoo_models.FAMILIES if a.family == "all" else a.family.split(",")
    todo = []
    for fam in families:
        why = zoo_models.family_available(fam)
        if why:
            print(why, file=sys.stderr)
            continue
        todo += [(fam, n) for n in zoo_models.list_models(fam)]
    if a.only:
        only = set(a.only.split(","))
        todo = [(f, n) for f, n in todo if n in only]
    if a.shard:
        i, n = (int(x) for x in a.shard.split("/"))
        todo = todo[i::n]
    if a.limit:
        todo = todo[:a.limit]
    return todo


def sweep(a: argparse.Namespace) -> None:
    todo = select(a)
    m = meta(a)
    rows: list[dict] = []
    if a.resume and a.json and os.path.exists(a.json):
        rows = json.load(open(a.json))["rows"]
        done = {(r["family"], r["model"]) for r in rows}
        todo = [t for t in todo if t not in done]
    print(f"{len(todo)} models to run ({len(rows)} kept from {a.json})" if rows else
          f"{len(todo)} models to run", flush=True)
    lock = threading.Lock()
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as pool:
        futures = {pool.submit(run_one, a, f, n): (f, n) for f, n in todo}
        for k, fut in enumerate(concurrent.futures.as_completed(futures)):
            row = fut.result()
            with lock:
                rows.append(row)
                if a.json:
                    write_json(a.json, m, rows)
            print(f"[{k + 1}/{len(todo)} {time.perf_counter() - t0:.0f}s] {row['family']} "
                  f"{row['model']}: {row['status']} {cells(row)} ({row['wall_s']:.0f}s)"
                  + (f" {short(row.get('reason', ''), 120)}" if row["status"] != "ok" else ""),
                  flush=True)
    if a.markdown:
        write_markdown(a.markdown, m, rows)


def cells(r: dict) -> str:
    def pair(k: str, fmt: str = "{}") -> str:
        e, d = r.get(f"ember_{k}"), r.get(f"dynamo_{k}")
        return "/".join("-" if v is None else fmt.format(v) for v in (e, d))
    if r.get("status") not in ("ok", "ember_error", "dynamo_error", "both_error", "timeout",
                               "crashed"):
        return ""
    return (f"correct {pair('correct')} graphs {pair('graphs')} breaks {pair('breaks')} "
            f"recompiles {pair('recompiles')} capture_s {pair('capture_s', '{:.2f}')}")


# ---- reports --------------------------------------------------------------------------------

def differences(r: dict) -> list[str]:
    """What makes a row an exception worth a look (empty for a clean one)."""
    if r["status"] != "ok":
        return [r["status"]]
    out = []
    if r.get("ember_correct") is False:
        out.append("ember wrong" + (" (Dynamo too)" if r.get("dynamo_correct") is False else ""))
    elif r.get("dynamo_correct") is False:
        out.append("Dynamo wrong")
    if r.get("ember_breaks", 0) > r.get("dynamo_breaks", 0):
        out.append(f"more breaks ({r['ember_breaks']} vs {r['dynamo_breaks']})")
    if r.get("ember_recompiles", 0) > r.get("dynamo_recompiles", 0):
        every = (r.get("ember_recompiles_per_call") or [0, 0])[1] > 0
        out.append(f"recompiles ({r['ember_recompiles']} vs {r.get('dynamo_recompiles')}"
                   f"{', on call 3 too' if every else ''})")

    return out


def reason_of(r: dict) -> str:
    for k in ("reason", "ember_error", "dynamo_error", "ember_mismatch", "dynamo_mismatch"):
        if r.get(k):
            return r[k]
    if r.get("ember_breaks", 0) > r.get("dynamo_breaks", 0) and r.get("ember_break_reasons"):
        return r["ember_break_reasons"][0]
    if r.get("ember_recompile_reasons"):
        return r["ember_recompile_reasons"][0]
    return ""


def reasons(r: dict, key: str) -> list[str]:
    """The reasons of one row for a section of the report (see write_markdown)."""
    more = r["status"] == "ok" and "dynamo_breaks" in r
    if key == "first_break":
        return (r["ember_break_reasons"][:1] if more and r["ember_breaks"] > r["dynamo_breaks"]
                else [])
    if key == "first_recompile":
        return (r["ember_recompile_reasons"][:1] if more and r["ember_recompiles"]
                > r.get("dynamo_recompiles", 0) else [])
    if key == "construct":
        return ([re.sub(r"^RuntimeError: \w+( \(ids and images\))?: ", "",
                        r.get("reason", "").split(" | ")[0])]
                if r["status"] == "construct_failed" else [])
    if key in ("ember_error", "both_error"):
        return [r.get("ember_error", "")] if r["status"] == key else []
    v = r.get(key) or []
    return [v] if isinstance(v, str) else v


def summary(rows: list[dict]) -> list[str]:

    from collections import Counter
    status = Counter(r["status"] for r in rows)
    skipped = Counter(r.get("reason", "").split(" (")[0] for r in rows if r["status"] == "skipped")
    ran = [r for r in rows if r["status"] == "ok"]
    dyn_ok = [r for r in ran if r.get("dynamo_correct")]
    both = [r for r in dyn_ok if r.get("ember_correct")]
    judged = [r for r in ran if "ember_breaks" in r and "dynamo_breaks" in r]
    fewer = [r for r in judged if r["ember_breaks"] <= r["dynamo_breaks"]]
    rec = [r["model"] for r in ran if r.get("ember_recompiles") and not r.get("dynamo_recompiles")]
    every = [r for r in ran if r["model"] in rec
             and (r.get("ember_recompiles_per_call") or [0, 0])[1]]

    ratios = [r["ember_capture_s"] / r["dynamo_capture_s"] for r in judged
              if r.get("ember_capture_s") and r.get("dynamo_capture_s")]
    geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios)) if ratios else float("nan")
    built = sum(v for k, v in status.items() if k not in ("construct_failed", "skipped"))
    lines = [f"- models listed: {len(rows)}; constructed: {built}; construct_failed: "
             f"{status.get('construct_failed', 0)}; skipped: {status.get('skipped', 0)}"
             + "".join(f"\n  - {v}: {k}" for k, v in skipped.most_common()),
             "- status: " + ", ".join(f"{k} {v}" for k, v in status.most_common()),
             f"- ran both (ok): {len(ran)}; Dynamo correct on {len(dyn_ok)}, ember correct on "
             f"{len(both)} of those ({100 * len(both) / max(len(dyn_ok), 1):.0f}%)",
             f"- ember breaks <= Dynamo breaks: {len(fewer)} of {len(judged)} "
             f"({100 * len(fewer) / max(len(judged), 1):.0f}%)",
             f"- ember recompiles on calls 2/3 where Dynamo has none: {len(rec)}"
             + (f" ({', '.join(rec[:20])}{', ...' if len(rec) > 20 else ''})" if rec else ""),
             f"- of those, recompiling on call 3 too (every call, it seems): {len(every)}",

             f"- capture time ember / Dynamo, geomean over {len(ratios)}: {geo:.3f}x"]
    return lines


def write_markdown(path: str, m: dict, rows: list[dict]) -> None:
    rows = sorted(rows, key=lambda r: (r["family"], r["model"]))
    for r in rows:  # rows of older sweeps: one status for both compilers raising
        if r["status"] in ("ember_error", "dynamo_error"):
            r["status"] = status_of(r)


    def pair(r: dict, k: str, fmt: str = "{}") -> str:
        return " / ".join("-" if r.get(f"{p}_{k}") is None else fmt.format(r[f"{p}_{k}"])
                          for p in ("ember", "dynamo"))

    def cell(s: str) -> str:
        return short(clean(s), 200).replace("|", "\\|")


    lines = [f"# Zoo sweep: ember.compile against Dynamo ({m.get('date')})", "",
             f"torch {m.get('torch')}, transformers {m.get('transformers')}, timm {m.get('timm')}, "
             f"torchvision {m.get('torchvision')}, Python {m.get('python')}, device "
             f"{m.get('device')}{' (' + m['gpu'] + ')' if m.get('gpu') else ''}, {m.get('dtype')}. "
             f"Command: `{m.get('command')}`", "", "## Summary", "", *summary(rows), "",
             "## Exceptions", "", "| model | family | what differs | reason |", "|---|---|---|---|"]
    for r in rows:
        d = differences(r)
        if d and r["status"] != "skipped":
            lines.append(f"| {r['model']} | {r['family']} | {cell(', '.join(d))} | "
                         f"{cell(reason_of(r))} |")
    lines += ["", "## Reasons by kind", "", "Models per reason (the frame, source location and "
              "guarded values taken out), most common first. A model's first break is the one "
              "of its outermost frame; the breaks after it are often frames that the first left "
              "to run eagerly.", ""]
    for title, key in (("first ember break, models with more breaks than Dynamo", "first_break"),
                       ("first ember recompile, models with more recompiles than Dynamo",
                        "first_recompile"),
                       ("every ember graph break", "ember_break_reasons"),
                       ("every ember recompile on calls 2/3", "ember_recompile_reasons"),
                       ("ember errors (Dynamo ran)", "ember_error"),
                       ("ember and Dynamo both raised (ember's error)", "both_error"),
                       ("Dynamo graph breaks", "dynamo_break_reasons"),
                       ("construct failures (first shrink level's error)", "construct")):
        groups: dict[str, list[str]] = {}
        for r in rows:
            for k in dict.fromkeys(kind(t) for t in reasons(r, key)):

                groups.setdefault(k, []).append(r["model"])
        lines += [f"### {title}", "", "| models | reason | e.g. |", "|---|---|---|"]
        for k, ms in sorted(groups.items(), key=lambda kv: -len(kv[1]))[:25]:
            lines.append(f"| {len(ms)} | {cell(k)} | {', '.join(ms[:3])} |")
        lines.append("")
    lines += ["", "## All models", "", "| model | family | status | correct e / d | graphs e / d "
              "| breaks e / d | recompiles e / d | capture s e / d | wall s |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['family']} | {r['status']} | {pair(r, 'correct')} | "
                     f"{pair(r, 'graphs')} | {pair(r, 'breaks')} | {pair(r, 'recompiles')} | "
                     f"{pair(r, 'capture_s', '{:.3f}')} | {r.get('wall_s', 0):.0f} |")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def repro(a: argparse.Namespace) -> None:
    """One model under ember.compile, three calls, with ember's logs of breaks and recompiles on
    stderr and each call's frame compiles and error against eager: what to attach to a bug."""
    import logging
    os.environ.setdefault("EMBER_LOGS", "graph_breaks,recompiles")
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    import torch
    sys.path.insert(0, HERE)
    import zoo_models
    torch.set_num_threads(a.threads)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[a.dtype]
    wl = zoo_models.build(a.family, a.repro, a.device, dtype, image_cap=a.image_cap)
    print(f"{a.repro}: {wl.info}")
    import ember
    import ember.capture
    with torch.no_grad():
        ref = tensors_of(wl.model(*wl.args, **wl.kwargs))
        compiled = ember.compile(wl.model)
        for i in range(3):
            before = len(ember.capture.records())
            ok, err, why = compare(ref, tensors_of(compiled(*wl.args, **wl.kwargs)), 1e-3)
            print(f"call {i + 1}: correct {ok} max abs err {err:.3g} {why}")
            for r in ember.capture.records()[before:]:
                what = "graph" if r["captured"] else "eager"
                print(f"  {what} {r['nodes']} nodes {'break ' if r['graph_break'] else ''}"
                      f"{clean(r['code'])} {short(clean(r['reason']), 300)}")


def merge(a: argparse.Namespace) -> None:
    rows: dict[tuple[str, str], dict] = {}
    metas = []
    for path in a.merge:
        data = json.load(open(path))
        metas.append(data["meta"])
        for r in data["rows"]:
            rows[(r["family"], r["model"])] = r
    m = dict(metas[0]) if metas else {}
    m["command"] = " ; ".join(x.get("command", "") for x in metas)
    if a.json:
        write_json(a.json, m, list(rows.values()))
    if a.markdown:
        write_markdown(a.markdown, m, list(rows.values()))
    print("\n".join(summary(list(rows.values()))))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--family", default="all",
                   help="transformers, timm, torchvision (comma list) or all")

    p.add_argument("--only", default="", help="comma-separated model names")
    p.add_argument("--limit", type=int, default=0)
    p.add_argument("--shard", default="", help="i/n: every n-th model from the i-th (0-based)")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per model")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="fp32", choices=("fp32", "bf16"))
    p.add_argument("--threads", type=int, default=1, help="torch threads per model process")
    p.add_argument("--image-cap", type=int, default=224, help="timm: largest input size tried")
    p.add_argument("--json", default="")
    p.add_argument("--markdown", default="")
    p.add_argument("--resume", action="store_true", help="skip the models already in --json")
    p.add_argument("--list", action="store_true", help="print the model names and exit")
    p.add_argument("--merge", nargs="+", default=None, help="shard JSONs to combine")
    p.add_argument("--repro", default="", help="one model of --family under ember.compile, "
                   "with ember's logs and each call's frame compiles")
    p.add_argument("--worker", default="", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        return worker(a)
    if a.merge:
        return merge(a)
    if a.repro:
        return repro(a)

    if a.list:
        for fam, name in select(a):
            print(f"{fam} {name}")
        return
    sweep(a)


if __name__ == "__main__":
    main()
