"""Differential testing: run a program eagerly and through `torch.compile`, compare everything.

`check_model(fn, args)` runs `fn` eagerly and compiled (with ember by default) on separate clones
of its inputs (and separate deep copies of `fn` when it is an `nn.Module`), and compares:

- the outputs, recursively (tensors, tuples, lists, dicts, dataclasses, `ModelOutput`s, plain
  values): dtype, shape, device, strides of dims of size > 1, values with dtype-aware tolerances;
- the inputs after the runs (in-place mutations of inputs must match);
- the module's parameters and buffers after the runs (e.g. BatchNorm running stats);
- which outputs alias which inputs (a view of an input must stay a view of that input);
- with `grad=True`, the gradients of the inputs and parameters.

It runs both twice, in lockstep, so the compiled program's cached path is checked too, and
returns ember's counters (`ember.metrics.snapshot()` plus `fallback_reasons`) after the compiled
runs.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
from collections.abc import Mapping
from typing import Any, Callable, Iterable

import os

import torch

__all__ = ["check_model", "compare", "clone_inputs", "default_tolerances"]

# The defaults of torch.testing.assert_close, by dtype: (rtol, atol).
_TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7),
    torch.complex32: (1e-3, 1e-5),
    torch.complex64: (1.3e-6, 1e-5),
    torch.complex128: (1e-7, 1e-7),
}


@contextlib.contextmanager
def recorded_compiled_functions():
    """Yields a list that collects the training graphs (`_C.CompiledFunction`) that
    torch.compile(backend="ember") makes inside the block, to read their forward and backward
    programs (`forward_steps`, `backward_steps`) and counters (`saved_bytes`,
    `backward_unfused_runs`)."""
    import sys  # noqa: PLC0415

    from . import backend as _  # noqa: F401, PLC0415

    module = sys.modules["ember.backend"]
    real = module._C
    made: list = []

    class Recorder:
        def __getattr__(self, name: str):
            return getattr(real, name)

        @staticmethod
        def CompiledFunction(*args, **kwargs):  # noqa: N802
            made.append(real.CompiledFunction(*args, **kwargs))
            return made[-1]

    module._C = Recorder()
    try:
        yield made
    finally:
        module._C = real


def default_tolerances(dtype: torch.dtype) -> tuple[float, float]:
    """(rtol, atol) for `dtype`; (0, 0) for integer, bool and other exact dtypes."""
    return _TOLERANCES.get(dtype, (0.0, 0.0))


# --------------------------------------------------------------------------------------------
# Cloning inputs
# --------------------------------------------------------------------------------------------


def _storage_key(t: torch.Tensor):
    try:
        return (t.device, t.untyped_storage().data_ptr())
    except Exception:  # sparse, nested, or other tensors without a plain storage
        return None


def clone_inputs(obj: Any) -> Any:
    """A deep clone of `obj` in which every tensor is copied with the same sizes, strides,
    storage offset and dtype, and tensors that share a storage in `obj` share one (cloned)
    storage in the result, so views of one another stay views of one another (and one tensor
    object appearing twice becomes one cloned object). `requires_grad`
    is kept (the clones are leaves). Non-tensor leaves are kept as they are."""
    storages: dict[Any, torch.UntypedStorage] = {}
    memo: dict[int, torch.Tensor] = {}  # the same tensor object twice stays one object

    def clone_tensor(t: torch.Tensor) -> torch.Tensor:
        if id(t) in memo:
            return memo[id(t)]
        out = memo[id(t)] = _clone_tensor(t)
        return out

    def _clone_tensor(t: torch.Tensor) -> torch.Tensor:
        key = _storage_key(t)
        if key is None or t.layout != torch.strided or type(t) not in (torch.Tensor, torch.nn.Parameter):
            out = t.detach().clone()
        else:
            if key not in storages:
                storages[key] = t.untyped_storage().clone()
            with torch.no_grad():
                out = torch.empty(0, dtype=t.dtype, device=t.device)
                out.set_(storages[key], t.storage_offset(), t.size(), t.stride())
        if isinstance(t, torch.nn.Parameter):
            out = torch.nn.Parameter(out, requires_grad=t.requires_grad)
        elif t.requires_grad:
            out.requires_grad_(True)
        return out

    def rec(x):
        if isinstance(x, torch.Tensor):
            return clone_tensor(x)
        if isinstance(x, tuple) and hasattr(x, "_fields"):  # namedtuple
            return type(x)(*[rec(v) for v in x])
        if isinstance(x, (list, tuple)):
            return type(x)(rec(v) for v in x)
        if isinstance(x, dict):
            return type(x)((k, rec(v)) for k, v in x.items())
        return x

    return rec(obj)


def _perturbed(obj: Any, seed: int) -> Any:
    """clone_inputs(obj), with every floating-point storage scaled elementwise by seeded
    factors in [0.5, 1.5). Scaling whole storages keeps inputs that alias consistent."""
    out = clone_inputs(obj)
    g = torch.Generator().manual_seed(10_000 + seed)
    seen = set()
    for _, t in _tensor_leaves(out, ""):
        key = _storage_key(t)
        if key is None or key in seen or t.layout != torch.strided or not t.is_floating_point():
            continue
        seen.add(key)
        storage = t.untyped_storage()
        n = storage.nbytes() // t.element_size()
        with torch.no_grad():
            flat = torch.empty(0, dtype=t.dtype, device=t.device).set_(storage, 0, (n,), (1,))
            factors = torch.rand(n, generator=g, dtype=torch.float64) + 0.5
            flat.mul_(factors.to(device=t.device, dtype=t.dtype))
    return out


# --------------------------------------------------------------------------------------------
# Comparing
# --------------------------------------------------------------------------------------------


def _is_dataclass_instance(x) -> bool:
    return dataclasses.is_dataclass(x) and not isinstance(x, type)


def _describe(x) -> str:
    if isinstance(x, torch.Tensor):
        return f"Tensor(shape={list(x.shape)}, dtype={x.dtype}, stride={list(x.stride()) if x.layout == torch.strided else '-'})"
    r = repr(x)
    return r if len(r) < 200 else r[:200] + "..."


def _matches(path: str, patterns) -> bool:
    if patterns is True:
        return True
    if not patterns:
        return False
    if callable(patterns):
        return bool(patterns(path))
    return path in patterns


def _compare_tensor(expected: torch.Tensor, actual: torch.Tensor, path: str, *, rtol, atol,
                    check_strides: bool, metadata_only: bool, what: str) -> None:
    def fail(msg):
        raise AssertionError(f"{what} {path}: {msg}")

    if not isinstance(actual, torch.Tensor):
        fail(f"expected a tensor, got {type(actual).__name__}: {_describe(actual)}")
    if actual.dtype != expected.dtype:
        fail(f"dtype differs: eager {expected.dtype}, compiled {actual.dtype}")
    if actual.shape != expected.shape:
        fail(f"shape differs: eager {list(expected.shape)}, compiled {list(actual.shape)}")
    if actual.device != expected.device:
        fail(f"device differs: eager {expected.device}, compiled {actual.device}")
    if actual.layout != expected.layout:
        fail(f"layout differs: eager {expected.layout}, compiled {actual.layout}")
    if type(actual) is not type(expected) and not (
        isinstance(actual, torch.Tensor) and type(expected) in (torch.Tensor, torch.nn.Parameter)
        and type(actual) in (torch.Tensor, torch.nn.Parameter)
    ):
        fail(f"tensor type differs: eager {type(expected).__name__}, compiled {type(actual).__name__}")
    if check_strides and expected.layout == torch.strided and expected.numel() > 0:
        dims = [d for d in range(expected.dim()) if expected.size(d) > 1]
        es = [expected.stride(d) for d in dims]
        cs = [actual.stride(d) for d in dims]
        if es != cs:
            fail(f"strides differ (dims of size > 1: {dims}): eager {list(expected.stride())}, "
                 f"compiled {list(actual.stride())} for shape {list(expected.shape)}")
    if metadata_only:
        return

    e = expected.detach()
    a = actual.detach()
    if e.layout != torch.strided:
        e = e.to_dense()
        a = a.to_dense()
    if e.is_complex():
        e = torch.view_as_real(e.resolve_conj())
        a = torch.view_as_real(a.resolve_conj())
    d_rtol, d_atol = default_tolerances(expected.dtype)
    r = d_rtol if rtol is None else rtol
    t = d_atol if atol is None else atol
    if e.numel() == 0:
        return
    if not (e.is_floating_point() or expected.is_complex()):
        eq = a == e  # integers and bools: exact, whatever the tolerances
        if not bool(eq.all()):
            bad = (~eq).nonzero()
            n = bad.shape[0]
            idx = tuple(bad[0].tolist())
            diff = (a.long() - e.long()).abs().max().item() if e.dtype != torch.bool else 1
            fail(f"values differ in {n} of {e.numel()} elements; max abs diff {diff}; "
                 f"first at index {idx}: eager {e[idx].item()}, compiled {a[idx].item()}")
        return

    ed = e.to(torch.float64)
    ad = a.to(torch.float64)
    both_nan = torch.isnan(ed) & torch.isnan(ad)
    any_inf = torch.isinf(ed) | torch.isinf(ad)
    diff = (ad - ed).abs()
    close = (diff <= t + r * ed.abs()) & ~any_inf
    ok = close | both_nan | (any_inf & (ed == ad))
    if not bool(ok.all()):
        bad = ~ok
        n = int(bad.sum())
        finite = torch.where(bad & torch.isfinite(diff), diff, torch.zeros_like(diff))
        max_abs = float(finite.max()) if bool(torch.isfinite(diff[bad]).any()) else math.nan
        rel = diff / ed.abs().clamp_min(1e-30)
        max_rel = float(torch.where(bad & torch.isfinite(rel), rel, torch.zeros_like(rel)).max())
        flat = int(torch.where(bad, torch.nan_to_num(diff, nan=math.inf), torch.full_like(diff, -1.0)).argmax())
        idx = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), ed.shape))
        fail(f"values differ in {n} of {ed.numel()} elements (rtol={r}, atol={t}); max abs diff "
             f"{max_abs:.6g}, max rel diff {max_rel:.6g}; worst at index {idx}: eager "
             f"{ed[idx].item()!r}, compiled {ad[idx].item()!r}")


def compare(expected: Any, actual: Any, path: str = "out", *, rtol=None, atol=None,
            check_strides: bool = True, metadata_only=None, what: str = "output") -> None:
    """Assert that `actual` matches `expected` recursively; raises AssertionError naming the
    first differing path. `metadata_only` is True (all tensors), a collection of paths, or a
    predicate on paths: tensors there are compared by dtype/shape/strides only (e.g. `empty`)."""

    def rec(e, a, p):
        if isinstance(e, torch.Tensor):
            _compare_tensor(e, a, p, rtol=rtol, atol=atol, check_strides=check_strides,
                            metadata_only=_matches(p, metadata_only), what=what)
            return
        if isinstance(a, torch.Tensor):
            raise AssertionError(f"{what} {p}: expected {_describe(e)}, got {_describe(a)}")
        if type(e) is not type(a):
            raise AssertionError(f"{what} {p}: type differs: eager {type(e).__name__}, compiled "
                                 f"{type(a).__name__} ({_describe(a)})")
        if isinstance(e, Mapping):  # dict, OrderedDict, transformers ModelOutput
            ek, ak = list(e.keys()), list(a.keys())
            if ek != ak:
                raise AssertionError(f"{what} {p}: keys differ: eager {ek}, compiled {ak}")
            for k in ek:
                sub = f"{p}.{k}" if isinstance(k, str) and k.isidentifier() and _is_dataclass_instance(e) else f"{p}[{k!r}]"
                rec(e[k], a[k], sub)
            return
        if _is_dataclass_instance(e):
            for f in dataclasses.fields(e):
                rec(getattr(e, f.name), getattr(a, f.name), f"{p}.{f.name}")
            return
        if hasattr(e, "to_tuple") and callable(e.to_tuple):
            rec(tuple(e.to_tuple()), tuple(a.to_tuple()), f"{p}.to_tuple()")
            return
        if isinstance(e, torch.Size):
            if e != a:
                raise AssertionError(f"{what} {p}: differs: eager {e}, compiled {a}")
            return
        if isinstance(e, (list, tuple)):
            if len(e) != len(a):
                raise AssertionError(f"{what} {p}: length differs: eager {len(e)}, compiled {len(a)}")
            for i, (x, y) in enumerate(zip(e, a)):
                rec(x, y, f"{p}[{i}]")
            return
        if isinstance(e, float) and isinstance(a, float):
            if math.isnan(e) and math.isnan(a):
                return
            r = 1.3e-6 if rtol is None else rtol
            t = 1e-5 if atol is None else atol
            if not abs(a - e) <= t + r * abs(e):
                raise AssertionError(f"{what} {p}: differs: eager {e!r}, compiled {a!r}")
            return
        try:
            same = e == a
            same = bool(same)
        except Exception as exc:  # noqa: BLE001
            raise AssertionError(f"{what} {p}: cannot compare {_describe(e)} with {_describe(a)}: {exc}")
        if not same:
            raise AssertionError(f"{what} {p}: differs: eager {_describe(e)}, compiled {_describe(a)}")

    rec(expected, actual, path)


# --------------------------------------------------------------------------------------------
# Aliasing and gradients
# --------------------------------------------------------------------------------------------


def _tensor_leaves(obj, path):
    """(path, tensor) for each tensor inside args/outputs, with the same path naming as compare."""
    out = []

    def rec(x, p):
        if isinstance(x, torch.Tensor):
            out.append((p, x))
        elif isinstance(x, Mapping):
            for k, v in x.items():
                rec(v, f"{p}[{k!r}]")
        elif _is_dataclass_instance(x):
            for f in dataclasses.fields(x):
                rec(getattr(x, f.name), f"{p}.{f.name}")
        elif isinstance(x, (list, tuple)):
            for i, v in enumerate(x):
                rec(v, f"{p}[{i}]")

    rec(obj, path)
    return out


def _alias_map(outputs, inputs) -> dict[str, list[str]]:
    """For each output tensor path, the input tensor paths and the other output paths it shares
    a storage with."""
    storages: dict[Any, list[str]] = {}
    args, kwargs = inputs
    for p, t in _tensor_leaves(args, "args") + _tensor_leaves(kwargs, "kwargs"):
        k = _storage_key(t)
        if k is not None and t.numel() > 0:
            storages.setdefault(k, []).append(p)
    leaves = _tensor_leaves(outputs, "out")
    for p, t in leaves:
        k = _storage_key(t)
        if k is not None and t.numel() > 0:
            storages.setdefault(k, []).append(p)
    out = {}
    for p, t in leaves:
        k = _storage_key(t)
        out[p] = sorted(q for q in storages.get(k, []) if q != p) if k is not None and t.numel() > 0 else []
    return out


def _loss(outputs) -> torch.Tensor | None:
    """A deterministic scalar from the floating-point outputs, for gradient checks."""
    total = None
    for _, t in _tensor_leaves(outputs, "out"):
        if t.requires_grad and t.is_floating_point():
            g = torch.Generator().manual_seed(1234)
            w = torch.rand(t.shape, generator=g, dtype=torch.float64).to(t.device, t.dtype)
            term = (t * w).sum()
            total = term if total is None else total + term
    return total


def _grads(module, inputs) -> dict[str, Any]:
    out = {}
    args, kwargs = inputs
    for p, t in _tensor_leaves(args, "args") + _tensor_leaves(kwargs, "kwargs"):
        if t.requires_grad:
            out[f"{p}.grad"] = t.grad
    if isinstance(module, torch.nn.Module):
        for n, prm in module.named_parameters():
            if prm.requires_grad:
                out[f"module.{n}.grad"] = prm.grad
    return out


# --------------------------------------------------------------------------------------------
# check_model
# --------------------------------------------------------------------------------------------


def _module_state(m: torch.nn.Module) -> dict[str, Any]:
    """state_dict() plus non-persistent buffers."""
    state = dict(m.state_dict(keep_vars=True))
    for n, b in m.named_buffers(remove_duplicate=False):
        state.setdefault(n, b)
    return state


def check_model(
    fn: Callable,
    args: Iterable = (),
    kwargs: dict | None = None,
    *,
    backend: Any = "ember",
    atol: float | None = None,
    rtol: float | None = None,
    check_strides: bool = True,
    check_mutations: bool = True,
    check_aliasing: bool = True,
    expect_graphs: int | None = None,
    expect_fallbacks: int | None = None,
    fullgraph: bool = False,
    seed: int = 0,
    grad: bool = False,
    no_grad: bool | str | None = None,
    metadata_only=None,
    runs: int = 2,
    dynamic: bool | None = False,
    check_recompile: bool = True,
    vary_inputs: bool = True,
) -> dict:
    """Run `fn(*args, **kwargs)` eagerly and through `torch.compile(backend=backend)`; assert
    that outputs, input mutations, module state (and with `grad=True` gradients) match.

    - fn: a function or an `nn.Module` (deep-copied separately for the eager and compiled runs).
    - atol/rtol: override the dtype-aware defaults (those of torch.testing.assert_close) for
      floating-point and complex values; integers and bools are always compared exactly.
    - check_strides: compare strides of dims of size > 1.
    - check_mutations: compare inputs and module state (parameters, buffers) after the runs.
    - check_aliasing: an output that shares storage with inputs or other outputs eagerly must
      share storage with the same inputs/outputs when compiled, and vice versa.
    - expect_graphs / expect_fallbacks: assert ember's counters after the compiled runs.
    - seed: `torch.manual_seed(seed)` before each run, so random ops match.
    - grad: compare gradients too (backward of a fixed weighted sum of the outputs). Inputs
      that should get gradients must have `requires_grad=True`.
    - no_grad: run both under `torch.no_grad()` (True), `torch.inference_mode()`
      ("inference_mode") or in the current grad mode (False); defaults to `not grad`.
    - metadata_only: True, or output paths (e.g. {"out", "out[1]"}) or a predicate: compare
      only dtype/shape/strides there (for uninitialized values such as `torch.empty`).
    - runs: how many times each is run, in lockstep (the second compiled run uses the cache).
    - dynamic: passed to torch.compile (False: static shapes; EMBER_TEST_DYNAMIC=1 turns False
      into True, the suite's dynamic-shapes run in scripts/test.sh).
    - vary_inputs: runs after the first get floating-point inputs scaled elementwise by
      seeded factors in [0.5, 1.5) (signs kept), so a compiled program that baked input values
      in as constants is caught. Integer and bool inputs stay as they are.
    - check_recompile: assert that runs after the first compile nothing new (no new ember graph
      or fallback): the cached path is used.

    Returns ember's counters after the compiled runs: {"graphs", "nodes", "fallbacks",
    "fallback_reasons"}.
    """
    from . import metrics

    kwargs = dict(kwargs or {})
    args = tuple(args)
    if no_grad is None:
        no_grad = not grad
    if grad and no_grad:
        raise ValueError("check_model: grad=True needs no_grad=False")
    if runs < 1:
        raise ValueError("check_model: runs must be >= 1")

    is_module = isinstance(fn, torch.nn.Module)
    eager_fn = copy.deepcopy(fn) if is_module else fn
    compiled_target = copy.deepcopy(fn) if is_module else fn

    torch._dynamo.reset()
    metrics.reset()
    if os.environ.get("EMBER_TEST_DYNAMIC") == "1" and dynamic is False:
        dynamic = True  # the suite's second run: every graph with symbolic sizes (issue 35)
    compiled_fn = torch.compile(compiled_target, backend=backend, fullgraph=fullgraph, dynamic=dynamic)

    def ctx():
        if no_grad == "inference_mode":
            return torch.inference_mode()
        return torch.no_grad() if no_grad else contextlib.nullcontext()

    cmp = dict(rtol=rtol, atol=atol, check_strides=check_strides)
    first_snapshot = None
    for run in range(runs):
        tag = f"[run {run + 1} of {runs}] "
        run_inputs = (args, kwargs)
        if run > 0 and vary_inputs:
            run_inputs = _perturbed(run_inputs, seed=run)
        e_args, e_kwargs = clone_inputs(run_inputs)
        c_args, c_kwargs = clone_inputs(run_inputs)

        torch.manual_seed(seed)
        with ctx():
            e_out = eager_fn(*e_args, **e_kwargs)
        e_loss = _loss(e_out) if grad else None
        if e_loss is not None:
            e_loss.backward()

        torch.manual_seed(seed)
        with ctx():
            try:
                c_out = compiled_fn(*c_args, **c_kwargs)
            except Exception as exc:
                exc.add_note(f"check_model: raised by compiled run {run + 1} of {runs} "
                             f"(backend={backend!r}); ember counters {metrics.snapshot()}, "
                             f"fallback reasons {list(metrics.fallback_reasons)}")
                raise
        if run == 0:
            first_snapshot = metrics.snapshot()
        c_loss = _loss(c_out) if grad else None
        if grad and (e_loss is None) != (c_loss is None):
            raise AssertionError(f"{tag}eager and compiled outputs differ in requiring grad "
                                 f"(eager loss {e_loss}, compiled loss {c_loss})")
        if c_loss is not None:
            c_loss.backward()

        try:
            compare(e_out, c_out, "out", metadata_only=metadata_only, what="output", **cmp)
            if check_mutations:
                compare(e_args, c_args, "args", what="input after the run", **cmp)
                compare(e_kwargs, c_kwargs, "kwargs", what="input after the run", **cmp)
                if is_module:
                    compare(_module_state(eager_fn), _module_state(compiled_target), "module",
                            what="module state after the run", **cmp)
            if check_aliasing:
                ea = _alias_map(e_out, (e_args, e_kwargs))
                ca = _alias_map(c_out, (c_args, c_kwargs))
                for p in ea:
                    if ea[p] != ca.get(p, []):
                        raise AssertionError(
                            f"aliasing of {p} differs: eagerly it shares storage with "
                            f"{ea[p] or 'nothing'}, compiled with {ca.get(p) or 'nothing'}")
            if grad:
                compare(_grads(eager_fn, (e_args, e_kwargs)), _grads(compiled_target, (c_args, c_kwargs)),
                        "grads", what="gradient", **cmp)
                if is_module:
                    eager_fn.zero_grad(set_to_none=True)
                    compiled_target.zero_grad(set_to_none=True)
        except AssertionError as exc:
            raise AssertionError(f"{tag}{exc}\n  ember counters: {metrics.snapshot()}, "
                                 f"fallback reasons: {list(metrics.fallback_reasons)}") from None

    snap = metrics.snapshot()
    snap["fallback_reasons"] = list(metrics.fallback_reasons)
    if check_recompile and runs > 1 and first_snapshot is not None:
        if (snap["graphs"], snap["fallbacks"]) != (first_snapshot["graphs"], first_snapshot["fallbacks"]):
            raise AssertionError(
                f"the second compiled run compiled again (counters after run 1: {first_snapshot}, "
                f"after run {runs}: {dict(metrics.snapshot())}); expected the cached graph to be reused")
    if expect_graphs is not None and snap["graphs"] != expect_graphs:
        raise AssertionError(f"expected {expect_graphs} ember graph(s), got {snap['graphs']}; "
                             f"counters {snap}")
    if expect_fallbacks is not None and snap["fallbacks"] != expect_fallbacks:
        raise AssertionError(f"expected {expect_fallbacks} fallback(s), got {snap['fallbacks']}; "
                             f"counters {snap}")
    return snap
