"""Timing, compile time, memory and accuracy for one model under several backends.

Method (after PyTorch's benchmarks/dynamo/common.py, see docs/benchmarks.md):

* Each backend gets its own copy of the same randomly initialised model (seed 1337) and the same inputs.
* Compile time = the backend's first call minus eager's first call (wall clock, device-synchronized),
  once with fresh compile caches (a new TORCHINDUCTOR_CACHE_DIR / TRITON_CACHE_DIR and cleared in-memory
  caches per model) and once with warm ones (a second compile of a fresh copy after torch._dynamo.reset(),
  in the same process and cache directory).
* Accuracy: the outputs of the second call (training: loss, outputs and every parameter gradient after
  the second step, the first optimizer step included) are compared with eager's and with an fp64 reference
  (model and float inputs cast to float64, no autocast) by the rule of torch._dynamo.utils.same:
  allclose(eager, backend, tol) or rmse(fp64, backend) <= k * rmse(fp64, eager) + tol / 10.
* Warm-up (5 calls in all), then ``repeat`` rounds; each round times every backend once, interleaved, each
  call between device synchronizations; speedup = median(eager) / median(backend).
* Peak memory (CUDA only): max_memory_allocated during one warm call, counted from before the backend's
  model copy was made (so its weights, gradients, optimizer state, compiled buffers and activations).
* Several harness processes may share one GPU (scripts/bench_shards.py --per-gpu): with
  EMBER_BENCH_GPU_LOCK set to a file, a process holds that file's lock (GpuTurn) for everything but a
  compiled backend's compile and first call, so that only compiles overlap: one process times, runs
  eager or checks accuracy at a time, while the others compile on their own CPUs.
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import fcntl
import dataclasses
import gc
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from typing import Any, Callable, Iterable, Sequence

import torch
from torch import nn

from . import models as M

SEED = M.SEED
MODES = ("inference", "training")
DTYPES = ("fp32", "bf16", "fp16", "bf16-cast", "fp16-cast")


# ------------------------------------------------------------------------------------------ results


def interquartile_ms(seconds: Sequence[float]) -> tuple[float, float]:
    """The first and third quartiles of timings in seconds, in ms (min and max below 4 of them)."""
    if len(seconds) < 4:
        return min(seconds) * 1e3, max(seconds) * 1e3
    q1, _, q3 = statistics.quantiles(seconds, n=4, method="inclusive")
    return q1 * 1e3, q3 * 1e3


@dataclasses.dataclass
class BackendResult:
    backend: str
    status: str = "not_run"  # pass | fail_accuracy | fail_to_run | not_run
    reason: str | None = None
    phase: str | None = None  # where it failed: compile, accuracy, warmup, memory, timing, warm_compile
    median_ms: float | None = None
    min_ms: float | None = None
    q1_ms: float | None = None  # the timed calls' interquartile range (min and max below 4 calls)
    q3_ms: float | None = None
    times_ms: list[float] = dataclasses.field(default_factory=list)
    speedup: float | None = None
    first_call_s: float | None = None
    first_call_warm_s: float | None = None
    compile_s: float | None = None  # cold caches: first call minus eager's first call
    compile_warm_s: float | None = None
    peak_mem_mb: float | None = None
    peak_mem_ratio: float | None = None  # backend peak / eager peak (lower = less memory)
    accuracy: str = "not_checked"  # pass | pass_cosine | fail | not_checked | eager_two_runs_differ
    accuracy_detail: str | None = None
    graphs: int | None = None
    graph_breaks: int | None = None
    recompiles_during_timing: int | None = None
    extra: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class ModelRun:
    model: str
    family: str
    suite: str
    mode: str
    dtype: str
    device: str
    batch_size: int | None = None
    status: str = "ok"  # ok | skipped | eager_fail | timeout | crashed
    note: str | None = None
    fp64_reference: str = "not_run"  # ok | failed: <reason> | not_run
    wall_s: float | None = None
    backends: dict[str, BackendResult] = dataclasses.field(default_factory=dict)
    gpu_turn_wait_s: float | None = None  # waits for the GPU lock (bench_shards.py --per-gpu)


@dataclasses.dataclass
class Settings:
    device: str = "cpu"
    suite: str = "small"
    backends: tuple[str, ...] = ("eager", "inductor")
    batch_size: int | None = None
    repeat: int = 30
    warmup: int = 5
    accuracy: bool = True
    warm_compile: bool = True
    fresh_cache: bool = True
    tf32: bool = True
    time_budget_s: float | None = None


# ------------------------------------------------------------------------------------------ helpers


def short_reason(e: BaseException, limit: int = 400) -> str:
    """One line: exception type and message; wrapped backend errors (BackendCompilerFailed) show the cause."""

    def first(x: BaseException) -> str:
        lines = [ln.strip() for ln in str(x).strip().splitlines() if ln.strip()]
        return lines[0] if lines else ""

    text = f"{type(e).__name__}: {first(e)}"
    inner = getattr(e, "inner_exception", None) or e.__cause__
    if inner is not None and inner is not e:
        text += f" {type(inner).__name__}: {first(inner)}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def synchronizer(device: str) -> Callable[[], None]:
    dev = torch.device(device)
    if dev.type == "cuda":
        return torch.cuda.synchronize
    if dev.type == "cpu":
        return lambda: None
    acc = getattr(torch, "accelerator", None)
    if acc is not None and hasattr(acc, "synchronize"):
        return acc.synchronize
    mod = getattr(torch, dev.type, None)
    return getattr(mod, "synchronize", lambda: None)


def is_cuda(device: str) -> bool:
    return torch.device(device).type == "cuda"


def free_memory(device: str) -> None:
    gc.collect()
    if is_cuda(device):
        torch.cuda.empty_cache()


def amp_context(dtype: str, device: str) -> Callable[[], Any]:
    if dtype in ("bf16", "fp16"):
        dt = torch.bfloat16 if dtype == "bf16" else torch.float16
        dev_type = torch.device(device).type
        return lambda: torch.autocast(device_type=dev_type, dtype=dt)
    return contextlib.nullcontext


def cast_dtype(dtype: str) -> torch.dtype | None:
    return {"bf16-cast": torch.bfloat16, "fp16-cast": torch.float16}.get(dtype)


def map_tensors(obj: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, dict):
        return type(obj)((k, map_tensors(v, fn)) for k, v in obj.items()) if type(obj) is dict else {
            k: map_tensors(v, fn) for k, v in obj.items()}
    if isinstance(obj, tuple):
        return tuple(map_tensors(v, fn) for v in obj)
    if isinstance(obj, list):
        return [map_tensors(v, fn) for v in obj]
    return obj


def cast_floats(obj: Any, dt: torch.dtype) -> Any:
    return map_tensors(obj, lambda t: t.to(dt) if t.is_floating_point() else t)


def flatten(obj: Any, prefix: str = "out") -> list[tuple[str, Any]]:
    """(name, tensor-or-None) pairs in a stable order; HF ModelOutput is a dict."""
    if isinstance(obj, torch.Tensor) or obj is None:
        return [(prefix, obj)]
    if isinstance(obj, dict):
        out = []
        for k, v in obj.items():
            out += flatten(v, f"{prefix}.{k}")
        return out
    if isinstance(obj, (list, tuple)):
        out = []
        for i, v in enumerate(obj):
            out += flatten(v, f"{prefix}[{i}]")
        return out
    if isinstance(obj, (int, float, bool)):
        return [(prefix, torch.tensor(obj))]
    return []


def detach_results(pairs: list[tuple[str, Any]], to_cpu: bool) -> list[tuple[str, Any]]:
    res = []
    for name, t in pairs:
        if isinstance(t, torch.Tensor):
            t = t.detach()
            t = t.to("cpu", copy=True) if to_cpu else t.clone()
        res.append((name, t))
    return res


# ----------------------------------------------------------------------------------------- accuracy


def rmse(ref: torch.Tensor, res: torch.Tensor) -> torch.Tensor:
    return torch.sqrt(torch.mean(torch.square(ref - res)))


# Elements per comparison step: outputs are compared piece by piece on the backend's device, so that a huge
# output (MT5's fp32 logits are 16 x 1024 x 250112 = 4.1e9 elements, 16 GB) never needs whole fp64 copies
# next to it on the GPU. Results are the same as comparing whole tensors (up to summation order).
COMPARE_CHUNK = 1 << 24


def _pieces(*ts: torch.Tensor):
    flats = [t.reshape(-1) for t in ts]
    n = flats[0].numel()
    for i in range(0, n, COMPARE_CHUNK):
        yield [x[i:i + COMPARE_CHUNK] for x in flats]


def _allclose(a: torch.Tensor, b: torch.Tensor, tol: float, dev: torch.device) -> bool:
    return all(torch.allclose(x.to(dev), y.to(dev, x.dtype), atol=tol, rtol=tol, equal_nan=True)
               for x, y in _pieces(a, b))


def same(ref: list, res: list, fp64: list | None, tol: float, cos: bool, low_precision: bool) -> tuple[bool, str]:
    """torch._dynamo.utils.same, reduced to flat lists of tensors. Returns (ok, detail).

    The work is done on the backend's device in pieces of COMPARE_CHUNK elements (see above)."""
    if len(ref) != len(res):
        return False, f"number of outputs differ: {len(ref)} vs {len(res)}"
    worst = ""
    for i, ((name, a), (_, b)) in enumerate(zip(ref, res)):
        f = fp64[i][1] if fp64 is not None and i < len(fp64) else None
        if a is None or b is None:
            if a is None and b is None:
                continue
            return False, f"{name}: None vs tensor"
        dev = b.device
        if a.shape != b.shape:
            return False, f"{name}: shape {tuple(a.shape)} vs {tuple(b.shape)}"
        if not a.is_floating_point():
            if not all(torch.equal(x.to(dev), y.to(x.dtype)) for x, y in _pieces(a, b)):
                return False, f"{name}: integer/bool values differ"
            continue
        if cos:
            if all(torch.allclose(x.to(dev, torch.float64), y.to(dev, torch.float64), atol=tol, rtol=tol, equal_nan=True)
                   for x, y in _pieces(a, b)):
                continue
            dot = xx = yy = 0.0
            for x, y in _pieces(a, b):
                x, y = x.to(dev, torch.float64), y.to(dev, torch.float64)
                dot += torch.dot(x, y).item()
                xx += torch.dot(x, x).item()
                yy += torch.dot(y, y).item()
            sim = dot / math.sqrt(max(xx * yy, 1e-12))  # torch's cosine_similarity with eps=1e-6
            if not (sim >= 0.99):
                return False, f"{name}: cosine similarity {sim:.5f} < 0.99"
            continue
        if _allclose(a, b, tol, dev):
            continue
        if f is None:
            diff = max((x.to(dev, torch.float64) - y.to(dev, torch.float64)).abs().max().item() for x, y in _pieces(a, b))
            return False, f"{name}: not allclose(tol={tol:g}), max abs diff {diff:.3g}, no fp64 reference"
        nan_a = nan_b = False
        se_ref = se_res = 0.0
        count = 0
        for fc, ac, bc in _pieces(f, a, b):
            fc, ac, bc = fc.to(dev, torch.float64), ac.to(dev, torch.float64), bc.to(dev, torch.float64)
            nan_a = nan_a or bool(torch.isnan(ac).any())
            nan_b = nan_b or bool(torch.isnan(bc).any())
            finite = torch.isfinite(fc) & torch.isfinite(ac) & torch.isfinite(bc)
            zero = torch.zeros((), dtype=torch.float64, device=dev)
            se_ref += torch.square(torch.where(finite, fc - ac, zero)).sum().item()
            se_res += torch.square(torch.where(finite, fc - bc, zero)).sum().item()
            count += int(finite.sum())
        if nan_b and not nan_a:
            return False, f"{name}: NaN in backend output only"
        ref_err = math.sqrt(se_ref / count) if count else math.nan
        res_err = math.sqrt(se_res / count) if count else math.nan
        mult = 3.0 if (low_precision or b.dtype in (torch.bfloat16, torch.float16) or a.numel() < 1000 or tol >= 2e-2) else 2.0
        if res_err > mult * ref_err + tol / 10.0:
            return False, (f"{name}: rmse(fp64, backend)={res_err:.3g} > {mult:g} * rmse(fp64, eager)={ref_err:.3g}"
                           f" + {tol / 10:.1g}")
        if not worst:
            worst = f"{name}: passed by fp64 rmse ({res_err:.3g} vs eager {ref_err:.3g})"
    return True, worst


# -------------------------------------------------------------------------------------- backends


class BackendUnavailable(RuntimeError):
    pass


def resolve_backend(name: str) -> Callable[[nn.Module], Callable] | None:
    """A function that compiles a module for backend `name`; None for eager.

    "inductor" is torch.compile's default; "inductor-reduce-overhead" / "inductor-max-autotune" /
    "inductor-max-autotune-no-cudagraphs" pick a torch.compile mode; "ember" is the ember backend (the
    registered torch.compile backend, or ember.backend imported directly); "ember-capture" is
    ember.compile (ember's own bytecode capture, no Dynamo), "ember-capture-<mode>" ember.compile
    with that mode (e.g. ember-capture-reduce-overhead); any other name must be a registered
    torch.compile backend (torch._dynamo.list_backends()).
    """
    if name == "eager":
        return None
    if name == "ember-capture":
        import ember  # noqa: PLC0415

        return lambda m: ember.compile(m)
    if name.startswith("ember-capture-"):  # ember-capture-reduce-overhead: a mode of ember.compile
        import ember  # noqa: PLC0415

        mode = name[len("ember-capture-"):]
        return lambda m, _mode=mode: ember.compile(m, mode=_mode)
    if name == "inductor":
        return lambda m: torch.compile(m)
    if name.startswith("inductor-"):
        mode = name[len("inductor-"):]
        return lambda m, _mode=mode: torch.compile(m, mode=_mode)
    if name == "ember":
        import torch._dynamo as dynamo

        if "ember" in dynamo.list_backends(exclude_tags=()):
            return lambda m: torch.compile(m, backend="ember")
        # Not registered through the entry point (package not pip-installed): import it directly.
        try:
            import importlib

            mod = importlib.import_module("ember.backend")
        except Exception as e:  # noqa: BLE001
            stub_err = getattr(sys.modules.get("ember"), "__ember_import_error__", None)
            extra = f" (import ember failed: {stub_err})" if stub_err else ""
            raise BackendUnavailable(f"ember backend not registered with torch.compile and ember.backend cannot be "
                                     f"imported: {short_reason(e)}{extra}") from e
        fn = getattr(mod, "ember_backend", None) or getattr(mod, "backend", None)
        if fn is None:
            raise BackendUnavailable("ember.backend has no ember_backend/backend callable")
        return lambda m, _fn=fn: torch.compile(m, backend=_fn)
    return lambda m, _b=name: torch.compile(m, backend=_b)


# -------------------------------------------------------------------------------- compile caches


def _clear_inductor_caches() -> None:
    try:
        from torch._inductor.utils import clear_caches  # type: ignore[attr-defined]

        clear_caches()
        return
    except Exception:  # noqa: BLE001
        pass
    try:
        from torch._inductor.utils import clear_inductor_caches  # type: ignore[attr-defined]

        clear_inductor_caches()
    except Exception:  # noqa: BLE001
        pass


def _clear_ember_caches() -> None:
    """Forget ember's in-process kernel cache, so a fresh cache directory means a cold compile."""
    try:
        import ember._C

        ember._C.clear_kernel_memory_cache()
    except Exception:  # noqa: BLE001  (ember not built: nothing to clear)
        pass


_PRELUDE_DIR: list[str] = []


def _process_prelude_dir() -> str:
    if not _PRELUDE_DIR:
        _PRELUDE_DIR.append(tempfile.mkdtemp(prefix="ember_bench_prelude_"))
        atexit.register(shutil.rmtree, _PRELUDE_DIR[0], ignore_errors=True)
    return _PRELUDE_DIR[0]


@contextlib.contextmanager
def compile_cache_dir(fresh: bool):
    """New, empty Inductor/Triton and ember kernel cache directories for one model (cold compile),
    with in-process caches cleared too; warm = the caches as they are."""
    if not fresh:
        yield None
        return
    tmp = tempfile.mkdtemp(prefix="ember_bench_cache_")
    saved = {k: os.environ.get(k)
             for k in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "EMBER_CACHE_DIR")}
    # ember's precompiled prelude (standard headers and helpers, one per compiler and flags) is
    # built once per process run, by the first model's cold compile, like a one-time start-up;
    # the kernels themselves are compiled afresh for every model.
    os.environ.setdefault("EMBER_PRELUDE_DIR", _process_prelude_dir())
    _clear_inductor_caches()
    _clear_ember_caches()
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tmp
    os.environ["TRITON_CACHE_DIR"] = os.path.join(tmp, "triton")
    os.environ["EMBER_CACHE_DIR"] = os.path.join(tmp, "ember")
    try:
        yield tmp
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        _clear_inductor_caches()
        _clear_ember_caches()
        shutil.rmtree(tmp, ignore_errors=True)


def dynamo_counters() -> tuple[int, int]:
    try:
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"]), int(sum(counters["graph_break"].values()))
    except Exception:  # noqa: BLE001
        return 0, 0


def reset_dynamo() -> None:
    try:
        import torch._dynamo

        torch._dynamo.reset()
        from torch._dynamo.utils import counters

        counters.clear()
    except Exception:  # noqa: BLE001
        pass


def ember_metrics(reset: bool = False) -> dict | None:
    mod = sys.modules.get("ember.metrics")
    if mod is None:
        try:
            import importlib

            mod = importlib.import_module("ember.metrics")
        except Exception:  # noqa: BLE001
            return None
    try:
        if reset:
            mod.reset()
            return None
        snap = dict(mod.snapshot())
        reasons = list(getattr(mod, "fallback_reasons", []))[:5]
        if reasons:
            snap["fallback_reasons"] = reasons
        return snap
    except Exception:  # noqa: BLE001
        return None


# ---------------------------------------------------------------------------- one model, backends


class TrainWrapper(nn.Module):
    """forward returns (loss, outputs), so the loss is inside the compiled region."""

    def __init__(self, model: nn.Module, loss_fn: Callable[[Any], torch.Tensor]):
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn

    def forward(self, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, Any]:
        out = self.model(*args, **kwargs)
        return self.loss_fn(out), out


class Instance:
    """One backend's copy of the model, its optimizer and its step function."""

    def __init__(self, base: nn.Module, wl: M.Workload, mode: str, dtype: str, device: str,
                 compile_fn: Callable | None, fp64: bool = False):
        model = copy.deepcopy(base)
        args, kwargs = wl.args, wl.kwargs
        if fp64:
            model = model.double()
            args, kwargs = cast_floats(args, torch.float64), cast_floats(kwargs, torch.float64)
            amp = contextlib.nullcontext
        else:
            cd = cast_dtype(dtype)
            if cd is not None:
                model = model.to(cd)
                args, kwargs = cast_floats(args, cd), cast_floats(kwargs, cd)
            amp = amp_context(dtype, device)
        self.model = model
        self.training = mode == "training"
        target: nn.Module = TrainWrapper(model, wl.loss_fn) if self.training else model
        self.callable = compile_fn(target) if compile_fn is not None else target
        self.opt = torch.optim.SGD(model.parameters(), lr=0.01, foreach=True) if self.training else None
        self.args, self.kwargs, self.amp = args, kwargs, amp

    def step(self) -> Any:
        if not self.training:
            with torch.no_grad(), self.amp():
                return self.callable(*self.args, **self.kwargs)
        self.opt.zero_grad(set_to_none=True)
        with self.amp():
            loss, out = self.callable(*self.args, **self.kwargs)
        loss.backward()
        self.opt.step()
        return loss, out

    def results(self, out: Any, to_cpu: bool) -> list[tuple[str, Any]]:
        pairs = flatten(out, "loss_out" if self.training else "out")
        if self.training:
            pairs += [(f"grad.{n}", p.grad) for n, p in self.model.named_parameters()]
        return detach_results(pairs, to_cpu)


def timed(fn: Callable[[], Any], sync: Callable[[], None]) -> tuple[float, Any]:
    sync()
    torch.manual_seed(SEED)
    t0 = time.perf_counter()
    out = fn()
    sync()
    return time.perf_counter() - t0, out


class GpuTurn:
    """The GPU to oneself among harness processes sharing it: an exclusive lock on the file named by
    EMBER_BENCH_GPU_LOCK (no lock when it is unset). acquire() and release() may repeat."""

    def __init__(self, path: str | None = None):
        self.path = path if path is not None else os.environ.get("EMBER_BENCH_GPU_LOCK") or None
        self.fd: int | None = None
        self.waited_s = 0.0

    def acquire(self) -> None:
        if self.path is None or self.fd is not None:
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        t0 = time.perf_counter()
        fcntl.flock(fd, fcntl.LOCK_EX)
        self.waited_s += time.perf_counter() - t0
        self.fd = fd

    def release(self) -> None:
        if self.fd is None:
            return
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
        self.fd = None


def run_model(spec: M.ModelSpec, mode: str, dtype: str, s: Settings,
              progress: Callable[[str], None] = lambda _msg: None) -> ModelRun:
    run = ModelRun(model=spec.name, family=spec.family, suite=s.suite, mode=mode, dtype=dtype, device=s.device)
    backends = list(dict.fromkeys(["eager", *[b for b in s.backends if b != "eager"]]))
    run.backends = {b: BackendResult(backend=b) for b in backends}
    t_start = time.perf_counter()
    if spec.fp32_only and dtype != "fp32":
        run.status, run.note = "skipped", "fp32-only model (as in PyTorch's harness)"
        return run
    if not spec.available():
        run.status, run.note = "skipped", f"package '{spec.package}' is not installed"
        return run
    sync = synchronizer(s.device)
    cuda = is_cuda(s.device)
    tol = spec.tol_training if mode == "training" else spec.tol_inference
    if mode == "inference" and not cuda and spec.family == "transformers":
        tol = max(tol, 5e-3)
    low_precision = dtype != "fp32"
    if low_precision:
        tol = max(tol, 1e-2)

    reset_dynamo()
    progress("build")
    try:
        wl = spec.build(s.suite, mode, s.device, s.batch_size)
    except M.MissingPackage as e:
        run.status, run.note = "skipped", str(e)
        return run
    except Exception as e:  # noqa: BLE001
        run.status, run.note = "eager_fail", f"build failed: {short_reason(e)}"
        run.backends["eager"].status, run.backends["eager"].reason, run.backends["eager"].phase = (
            "fail_to_run", run.note, "build")
        return run
    run.batch_size = wl.batch_size
    base = wl.model

    turn = GpuTurn()
    try:
        _run_backends(run, backends, base, wl, spec, mode, dtype, s, sync, cuda, tol, low_precision, turn, progress)
    finally:
        turn.release()
    if turn.path:
        run.gpu_turn_wait_s = round(turn.waited_s, 1)
    del base, wl
    reset_dynamo()
    free_memory(s.device)
    run.wall_s = time.perf_counter() - t_start
    return run


def _run_backends(run: ModelRun, backends: list[str], base: nn.Module, wl: M.Workload, spec: M.ModelSpec,
                  mode: str, dtype: str, s: Settings, sync: Callable[[], None], cuda: bool, tol: float,
                  low_precision: bool, turn: GpuTurn, progress: Callable[[str], None]) -> None:
    live: dict[str, Instance] = {}
    with compile_cache_dir(s.fresh_cache):
        turn.acquire()
        # fp64 reference
        fp64_res = None
        cos = False
        if s.accuracy:
            progress("fp64 reference")
            try:
                inst = Instance(base, wl, mode, dtype, s.device, None, fp64=True)
                inst.step()
                fp64_res = inst.results(inst.step(), to_cpu=True)
                run.fp64_reference = "ok"
            except Exception as e:  # noqa: BLE001
                run.fp64_reference = f"failed: {short_reason(e)}"
                cos = True
            finally:
                inst = None  # noqa: F841
                free_memory(s.device)

        eager_first = None
        eager_res = None
        eager_peak = None
        for b in backends:
            r = run.backends[b]
            phase = "compile"
            progress(f"{b}: compile + first call")
            inst = None
            try:
                compile_fn = resolve_backend(b)
                free_memory(s.device)
                base_mem = torch.cuda.memory_allocated() if cuda else 0
                reset_dynamo_counters_only()
                if b == "ember" or b.startswith("ember-capture"):
                    ember_metrics(reset=True)
                inst = Instance(base, wl, mode, dtype, s.device, compile_fn)
                if b != "eager":  # compiles may overlap other processes' turns
                    turn.release()
                dt, first_out = timed(inst.step, sync)
                if b == "ember" or b.startswith("ember-capture"):
                    # Candidate launch configurations left compiling in the background (Note
                    # [Candidates compiled in the background]) are done before any step is
                    # timed; the wait is reported beside the first call, not in it.
                    import ember
                    t_bg = time.perf_counter()
                    ember.finish_compiles()
                    r.extra["background_compile_s"] = round(time.perf_counter() - t_bg, 3)
                turn.acquire()
                # Dropped at once: kept alive (as it once was, in `_`), the previous backend's first
                # output is counted in this backend's base_mem and freed before its memory step,
                # which lowered every later backend's peak by one output's size.
                del first_out
                r.first_call_s = dt
                if b == "eager":
                    eager_first = dt
                elif eager_first is not None:
                    r.compile_s = dt - eager_first
                phase = "accuracy"
                sync()
                t_second = time.perf_counter()
                out = inst.step()
                sync()
                # The second call: where kernels tuned after the first (background candidates)
                # time their configurations.
                r.extra["second_call_s"] = round(time.perf_counter() - t_second, 3)
                if s.accuracy:
                    res = inst.results(out, to_cpu=(b == "eager"))
                    del out
                    if b == "eager":
                        eager_res = res
                        progress("eager: second run (determinism)")
                        inst2 = Instance(base, wl, mode, dtype, s.device, None)
                        inst2.step()
                        res2 = inst2.results(inst2.step(), to_cpu=False)
                        del inst2
                        ok, detail = same(eager_res, res2, fp64_res, tol, cos, low_precision)
                        del res2
                        r.accuracy = "pass" if ok else "eager_two_runs_differ"
                        r.accuracy_detail = detail or None
                        if not ok:
                            run.note = f"eager two runs differ: {detail}"
                    elif eager_res is not None:
                        ok, detail = same(eager_res, res, fp64_res, tol, cos, low_precision)
                        r.accuracy = ("pass_cosine" if cos else "pass") if ok else "fail"
                        r.accuracy_detail = detail or None
                        del res
                else:
                    del out
                phase = "warmup"
                progress(f"{b}: warm-up")
                for _ in range(max(0, s.warmup - 2)):
                    inst.step()
                sync()
                graphs, breaks = dynamo_counters()
                if b.startswith("ember-capture"):
                    m = ember_metrics() or {}
                    # ember's own capture: graphs it made, and breaks plus frames run eagerly.
                    graphs = m.get("graphs", 0)
                    breaks = m.get("graph_breaks", 0) + m.get("eager_frames", 0)
                if b != "eager":
                    r.graphs, r.graph_breaks = graphs, breaks
                if b == "ember" or b.startswith("ember-capture"):
                    m = ember_metrics()
                    if m is not None:
                        r.extra["ember_metrics"] = m
                phase = "memory"
                if cuda:
                    free_memory(s.device)
                    before = torch.cuda.memory_allocated()
                    torch.cuda.reset_peak_memory_stats()
                    inst.step()
                    sync()
                    peak = torch.cuda.max_memory_allocated()
                    r.peak_mem_mb = (peak - base_mem) / 2**20
                    # What the reading rests on: memory freed between this backend's base reading
                    # and its measured step (held by someone else, so not this backend's saving)
                    # makes the peak unreadable; it is flagged, not used.
                    r.extra["mem_mb"] = {"base": round(base_mem / 2**20, 1),
                                         "before_step": round(before / 2**20, 1),
                                         "peak": round(peak / 2**20, 1)}
                    held = before - base_mem  # this backend's own state: its model, its caches
                    if held < -2**20:
                        r.extra["mem_note"] = (f"{-held / 2**20:.0f} MB held before this "
                                               "backend's base reading was freed before its step")
                        r.peak_mem_mb = None
                    if b == "eager":
                        eager_peak = r.peak_mem_mb
                    elif eager_peak and r.peak_mem_mb is not None:
                        r.peak_mem_ratio = r.peak_mem_mb / eager_peak
                live[b] = inst
                r.status = "pass" if r.accuracy not in ("fail",) else "fail_accuracy"
            except Exception as e:  # noqa: BLE001
                turn.acquire()
                r.status, r.phase, r.reason = "fail_to_run", phase, short_reason(e)
                r.extra["traceback"] = traceback.format_exc(limit=-6)[-3000:]
                inst = None
                free_memory(s.device)
                if b == "eager":
                    run.status, run.note = "eager_fail", f"eager failed in {phase}: {r.reason}"
                    break
            progress(f"{b}: {r.status}")

        # interleaved timing
        if "eager" in live and s.repeat > 0:
            progress(f"timing {s.repeat} rounds x {len(live)} backends")
            g0 = dynamo_counters()[0]
            times: dict[str, list[float]] = {b: [] for b in live}
            for _ in range(s.repeat):
                for b in list(live):
                    try:
                        dt, _ = timed(live[b].step, sync)
                        times[b].append(dt)
                    except Exception as e:  # noqa: BLE001
                        rr = run.backends[b]
                        rr.status, rr.phase, rr.reason = "fail_to_run", "timing", short_reason(e)
                        del live[b]
                        times.pop(b, None)
                        if b == "eager":
                            run.status, run.note = "eager_fail", f"eager failed in timing: {rr.reason}"
            recompiles = dynamo_counters()[0] - g0
            eager_med = statistics.median(times["eager"]) if times.get("eager") else None
            for b, ts in times.items():
                if not ts:
                    continue
                rr = run.backends[b]
                rr.times_ms = [t * 1e3 for t in ts]
                rr.median_ms = statistics.median(ts) * 1e3
                rr.min_ms = min(ts) * 1e3
                rr.q1_ms, rr.q3_ms = interquartile_ms(ts)
                if eager_med and b != "eager":
                    rr.speedup = eager_med / statistics.median(ts)
                if b != "eager":
                    rr.recompiles_during_timing = recompiles
        live.clear()
        inst = None
        free_memory(s.device)

        # warm-cache compile time: dynamo reset, fresh copies, same cache directory
        if s.warm_compile and run.status == "ok":
            reset_dynamo()
            eager_warm = None
            for b in backends:
                r = run.backends[b]
                if r.status not in ("pass", "fail_accuracy"):
                    continue
                progress(f"{b}: warm-cache compile")
                try:
                    inst = Instance(base, wl, mode, dtype, s.device, resolve_backend(b))
                    dt, _ = timed(inst.step, sync)
                    r.first_call_warm_s = dt
                    if b == "eager":
                        eager_warm = dt
                    elif eager_warm is not None:
                        r.compile_warm_s = dt - eager_warm
                except Exception as e:  # noqa: BLE001
                    r.extra["warm_compile_error"] = short_reason(e)
                inst = None
                free_memory(s.device)
            reset_dynamo()


def reset_dynamo_counters_only() -> None:
    try:
        from torch._dynamo.utils import counters

        counters.clear()
    except Exception:  # noqa: BLE001
        pass


# --------------------------------------------------------------------------- per-call overhead


def _tiny_add(x: torch.Tensor) -> torch.Tensor:
    return x + 1


def _tiny_pointwise(x: torch.Tensor) -> torch.Tensor:
    y = x * 2 + 1
    y = torch.sin(y) * 3 - 1
    y = torch.cos(y) + x
    return torch.tanh(torch.relu(y) * 0.5)


_DYNAMO_EAGER = "dynamo (backend=eager)"
_EMBER_RUNTIME = "ember runtime (no Dynamo)"


def _overhead_compiler(name: str):
    if name == _DYNAMO_EAGER:
        return lambda fn: torch.compile(fn, backend="eager")
    if name == _EMBER_RUNTIME:
        import ember  # noqa: PLC0415
        from ember import _C  # noqa: PLC0415

        def compile_direct(fn, args):
            graph = ember.trace(fn, args)
            compiled = _C.CompiledGraph(graph)
            return lambda *a: compiled(*a)

        return compile_direct
    return resolve_backend(name)


def measure_overhead(backends: Iterable[str], device: str, calls: int = 100, rounds: int = 7,
                     progress: Callable[[str], None] = lambda _m: None) -> dict[str, dict]:
    """Per-call time of tiny graphs (where the work is negligible, so this is the per-call overhead).

    Also records the time of the backend's very first compile in the process (``startup_s``), which
    absorbs one-time initialisation so that later per-model compile times don't include it.
    """
    sync = synchronizer(device)
    out: dict[str, dict] = {}
    rows = ["eager", *backends]
    if "ember" in backends and device == "cpu":
        # What Dynamo costs by itself (its no-op backend), and ember's compiled graph called
        # directly (no Dynamo): the part of ember's per-call overhead that is ember's own. And
        # ember's own capture (ember.compile), which replaces Dynamo.
        rows += [_DYNAMO_EAGER, _EMBER_RUNTIME, "ember-capture"]
    for b in dict.fromkeys(rows):
        progress(f"per-call overhead: {b}")
        reset_dynamo()
        entry: dict[str, Any] = {}
        try:
            compile_fn = _overhead_compiler(b)
            torch.manual_seed(SEED)
            lin = nn.Linear(16, 16).to(device)
            cases = {
                "add (1 op, 16 elems)": (_tiny_add, (torch.randn(16, device=device),)),
                "pointwise (10 ops, 16 elems)": (_tiny_pointwise, (torch.randn(16, device=device),)),
                "nn.Linear(16,16), batch 4": (lin, (torch.randn(4, 16, device=device),)),
            }
            with torch.no_grad():
                for i, (name, (fn, args)) in enumerate(cases.items()):
                    f = compile_fn(fn, args) if b == _EMBER_RUNTIME else (
                        compile_fn(fn) if compile_fn is not None else fn)
                    dt, _ = timed(lambda: f(*args), sync)
                    if i == 0:
                        entry["startup_s"] = dt
                    for _ in range(10):
                        f(*args)
                    per_call = []
                    for _ in range(rounds):
                        sync()
                        t0 = time.perf_counter()
                        for _ in range(calls):
                            f(*args)
                        sync()
                        per_call.append((time.perf_counter() - t0) / calls * 1e6)
                    entry[name] = statistics.median(per_call)
            entry["status"] = "pass"
            if b in (_DYNAMO_EAGER, _EMBER_RUNTIME):
                entry["reference_only"] = True
        except Exception as e:  # noqa: BLE001
            entry["status"] = "fail_to_run"
            entry["reason"] = short_reason(e)
        out[b] = entry
    reset_dynamo()
    return out


# ---------------------------------------------------------------------------------- environment


def environment(device: str) -> dict[str, Any]:
    import platform

    env: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
        "cpu": _cpu_name(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "device": device,
    }
    try:
        env["loadavg_at_start"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        pass
    if hasattr(os, "sched_getaffinity"):
        env["cpus_usable"] = len(os.sched_getaffinity(0))
    for var in ("CUDA_VISIBLE_DEVICES", "TORCHINDUCTOR_COMPILE_THREADS", "OMP_NUM_THREADS"):
        if os.environ.get(var) is not None:
            env[var] = os.environ[var]
    for pkg in ("transformers", "timm", "torchvision", "torchaudio", "torch_geometric", "triton", "numpy"):
        try:
            import importlib.metadata as md

            env[pkg] = md.version(pkg.replace("_", "-") if pkg == "torch_geometric" else pkg)
        except Exception:  # noqa: BLE001
            env[pkg] = None
    if is_cuda(device) and torch.cuda.is_available():
        idx = torch.device(device).index or 0
        env["gpu"] = torch.cuda.get_device_name(idx)
        env["cuda"] = torch.version.cuda
        env["gpu_memory_gb"] = round(torch.cuda.get_device_properties(idx).total_memory / 2**30, 1)
    try:
        import importlib.metadata as md

        env["ember"] = md.version("ember")
    except Exception:  # noqa: BLE001
        env["ember"] = "not installed (source tree)"
    return env


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "unknown"


def configure(s: Settings) -> None:
    if is_cuda(s.device):
        torch.backends.cuda.matmul.allow_tf32 = s.tf32
        torch.backends.cudnn.allow_tf32 = s.tf32
    try:
        from torch._dynamo import config as cfg

        cfg.cache_size_limit = max(getattr(cfg, "cache_size_limit", 8), 64)
        if hasattr(cfg, "accumulated_cache_size_limit"):
            cfg.accumulated_cache_size_limit = max(cfg.accumulated_cache_size_limit, 512)
    except Exception:  # noqa: BLE001
        pass


def geomean(xs: Iterable[float]) -> float | None:
    xs = [x for x in xs if x is not None and x > 0 and math.isfinite(x)]
    if not xs:
        return None
    return math.exp(sum(math.log(x) for x in xs) / len(xs))
