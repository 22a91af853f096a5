"""The OpInfo sweep's machinery, shared by test_opinfo_sweep.py (pytest) and sweep_report.py (a
table outside pytest).

For each OpInfo of `op_db` (torch.testing._internal.common_methods_invocations) whose ATen
lowering is in ember's pointwise table (src/sched/pointwise_ops.cpp), reduction-kernel set
(src/sched/reduction.h), index functions (src/sched/index_ops.h) or scatter kernels
(src/sched/scatter.h), each dtype of DTYPES the OpInfo supports on the CPU, and each forward
sample of `op.sample_inputs("cpu", dtype, requires_grad=False)`, it runs
`ember.testing.check_model` (eager vs torch.compile(backend="ember"), under no_grad, with
EMBER_REDUCTION_KERNELS=1) and classifies the sample:

  pass       outputs match and at least one generated kernel ran (kernels > 0)
  not_fused  outputs match, ember compiled the graph but made no kernel (it ran as ATen calls)
  fallback   outputs match, but ember fell back to eager for a graph (counters' fallbacks > 0)
  fail       check_model raised (wrong values/strides/aliasing, or an exception when compiled), or
             a generated kernel failed to compile (the graph then ran correctly without kernels)
  skip       eager itself raised on the sample (not counted in the pass rate)

The correctness pass rate is (pass + not_fused + fallback) / (all but skip); the fused rate is
pass / (all but skip).

Bounded by default: at most `EMBER_OPINFO_SAMPLES` (3) samples per (op, dtype) of the CI_OPS list;
EMBER_OPINFO_FULL=1 runs every sample of every op in OPS.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import sys
import time
import types
import unittest
import zlib

import torch


def _import_op_db():
    # common_utils imports expecttest (a test-only dependency of torch, absent here): a minimal
    # stand-in is enough for op_db and sample_inputs, which never use it.
    try:
        import expecttest  # noqa: F401
    except ImportError:
        stub = types.ModuleType("expecttest")
        stub.TestCase = unittest.TestCase
        stub.ACCEPT = False
        sys.modules["expecttest"] = stub
    from torch.testing._internal.common_methods_invocations import op_db

    return op_db


DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.int64)

# (OpInfo name, variant_test_name) -> the ATen overload(s) ember lowers it to, as ember's tracer
# records them (CompositeImplicit ops are already decomposed: relu6 -> hardtanh, softmax ->
# _softmax, layer_norm -> native_layer_norm, true_divide -> div.Tensor). Reduction kernels are on
# by default; the sweep also sets EMBER_REDUCTION_KERNELS=1 to be explicit.
POINTWISE_OPS: dict[tuple[str, str], str] = {
    ("add", ""): "aten::add.Tensor",
    ("sub", ""): "aten::sub.Tensor",
    ("mul", ""): "aten::mul.Tensor",
    ("div", "no_rounding_mode"): "aten::div.Tensor",
    ("div", "trunc_rounding"): "aten::div.Tensor_mode",
    ("div", "floor_rounding"): "aten::div.Tensor_mode",
    ("true_divide", ""): "aten::div.Tensor",
    ("exp", ""): "aten::exp",
    ("exp2", ""): "aten::exp2",
    ("expm1", ""): "aten::expm1",
    ("log", ""): "aten::log",
    ("log2", ""): "aten::log2",
    ("log10", ""): "aten::log10",
    ("log1p", ""): "aten::log1p",
    ("sqrt", ""): "aten::sqrt",
    ("rsqrt", ""): "aten::rsqrt",
    ("sin", ""): "aten::sin",
    ("cos", ""): "aten::cos",
    ("tan", ""): "aten::tan",
    ("asin", ""): "aten::asin",
    ("acos", ""): "aten::acos",
    ("atan", ""): "aten::atan",
    ("sinh", ""): "aten::sinh",
    ("cosh", ""): "aten::cosh",
    ("tanh", ""): "aten::tanh",
    ("asinh", ""): "aten::asinh",
    ("acosh", ""): "aten::acosh",
    ("atanh", ""): "aten::atanh",
    ("erf", ""): "aten::erf",
    ("erfc", ""): "aten::erfc",
    ("sigmoid", ""): "aten::sigmoid",
    ("reciprocal", ""): "aten::reciprocal",
    ("neg", ""): "aten::neg",
    ("abs", ""): "aten::abs",
    ("floor", ""): "aten::floor",
    ("ceil", ""): "aten::ceil",
    ("round", ""): "aten::round",
    ("trunc", ""): "aten::trunc",
    ("sign", ""): "aten::sign",
    ("pow", ""): "aten::pow.Tensor_Scalar / aten::pow.Tensor_Tensor",
    ("maximum", ""): "aten::maximum",
    ("minimum", ""): "aten::minimum",
    ("clamp", ""): "aten::clamp",
    ("clamp_min", ""): "aten::clamp_min",
    ("clamp_max", ""): "aten::clamp_max",
    ("nn.functional.hardtanh", ""): "aten::hardtanh",
    ("nn.functional.relu6", ""): "aten::hardtanh",
    ("nn.functional.relu", ""): "aten::relu",
    ("nn.functional.threshold", ""): "aten::threshold",
    ("nn.functional.leaky_relu", ""): "aten::leaky_relu",
    ("nn.functional.elu", ""): "aten::elu",
    ("nn.functional.softplus", ""): "aten::softplus",
    ("nn.functional.gelu", ""): "aten::gelu",
    ("nn.functional.silu", ""): "aten::silu",
    ("nn.functional.mish", ""): "aten::mish",
    ("nn.functional.hardsigmoid", ""): "aten::hardsigmoid",
    ("nn.functional.hardswish", ""): "aten::hardswish",
    ("eq", ""): "aten::eq.Tensor / aten::eq.Scalar",
    ("ne", ""): "aten::ne.Tensor / aten::ne.Scalar",
    ("lt", ""): "aten::lt.Tensor / aten::lt.Scalar",
    ("le", ""): "aten::le.Tensor / aten::le.Scalar",
    ("gt", ""): "aten::gt.Tensor / aten::gt.Scalar",
    ("ge", ""): "aten::ge.Tensor / aten::ge.Scalar",
    ("logical_not", ""): "aten::logical_not",
    ("logical_and", ""): "aten::logical_and",
    ("logical_or", ""): "aten::logical_or",
    ("logical_xor", ""): "aten::logical_xor",
    ("rsub", ""): "aten::rsub.Tensor / aten::rsub.Scalar",
    ("bitwise_and", ""): "aten::bitwise_and.Tensor / aten::bitwise_and.Scalar",
    ("bitwise_or", ""): "aten::bitwise_or.Tensor / aten::bitwise_or.Scalar",
    ("bitwise_xor", ""): "aten::bitwise_xor.Tensor / aten::bitwise_xor.Scalar",
    ("bitwise_not", ""): "aten::bitwise_not",
    ("bitwise_left_shift", ""): "aten::bitwise_left_shift.Tensor / .Tensor_Scalar",
    ("bitwise_right_shift", ""): "aten::bitwise_right_shift.Tensor / .Tensor_Scalar",
    ("isnan", ""): "aten::isnan",
    ("where", ""): "aten::where.self",
    ("clone", ""): "aten::clone",
    ("lerp", ""): "aten::lerp.Scalar",
    ("addcmul", ""): "aten::addcmul",
    ("addcdiv", ""): "aten::addcdiv",
    ("double", ""): "aten::_to_copy",
    ("float", ""): "aten::_to_copy",
    ("bfloat16", ""): "aten::_to_copy",
    ("to", ""): "aten::_to_copy",
}

REDUCTION_OPS: dict[tuple[str, str], str] = {
    ("softmax", ""): "aten::_softmax",
    ("softmax", "with_dtype"): "aten::_to_copy + aten::_softmax",
    ("log_softmax", ""): "aten::_log_softmax",
    ("log_softmax", "with_dtype"): "aten::_to_copy + aten::_log_softmax",
    ("nn.functional.softmin", ""): "aten::neg + aten::_softmax",
    ("nn.functional.layer_norm", ""): "aten::native_layer_norm",
    ("nn.functional.group_norm", ""): "aten::native_group_norm",
    ("nn.functional.batch_norm", ""): "aten::native_batch_norm / _native_batch_norm_legit_functional",
    ("sum", ""): "aten::sum / aten::sum.dim_IntList",
    ("mean", ""): "aten::mean / aten::mean.dim",
    ("prod", ""): "aten::prod / aten::prod.dim_int",
    ("amax", ""): "aten::amax",
    ("amin", ""): "aten::amin",
    ("max", "reduction_with_dim"): "aten::max.dim",
    ("max", "reduction_no_dim"): "aten::max",
    ("min", "reduction_with_dim"): "aten::min.dim",
    ("min", "reduction_no_dim"): "aten::min",
    ("argmax", ""): "aten::argmax",
    ("argmin", ""): "aten::argmin",
    ("any", ""): "aten::any / any.dim / any.dims",
    ("all", ""): "aten::all / all.dim / all.dims",
    ("var", ""): "aten::var.correction",
    ("var", "unbiased"): "aten::var.correction",
    ("std", ""): "aten::std.correction",
    ("std", "unbiased"): "aten::std.correction",
    ("var_mean", ""): "aten::var_mean.correction",
    ("var_mean", "unbiased"): "aten::var_mean.correction",
    ("std_mean", ""): "aten::std_mean.correction",
    ("std_mean", "unbiased"): "aten::std_mean.correction",
    ("logsumexp", ""): "aten::logsumexp",
}

# View, layout and indexing ops (src/sched/index_ops.h). A view returned by the graph stays an
# ATen call (it aliases its input, as in eager), so the sweep runs these through `_cloned`: the
# view is then read inside the clone's kernel.
VIEW_OPS: dict[tuple[str, str], str] = {
    ("view", ""): "aten::view",
    ("view_as", ""): "aten::view",
    ("reshape", ""): "aten::view / aten::clone + aten::_unsafe_view",
    ("reshape_as", ""): "aten::view / aten::clone + aten::_unsafe_view",
    ("flatten", ""): "aten::view",
    ("unflatten", ""): "aten::view",
    ("permute", ""): "aten::permute",
    ("movedim", ""): "aten::permute",
    ("transpose", ""): "aten::transpose.int",
    ("t", ""): "aten::t",
    ("expand", ""): "aten::expand",
    ("expand_as", ""): "aten::expand",
    ("squeeze", ""): "aten::squeeze / aten::squeeze.dim",
    ("squeeze", "multiple"): "aten::squeeze.dims",
    ("unsqueeze", ""): "aten::unsqueeze",
    ("narrow", ""): "aten::slice.Tensor",
    ("select", ""): "aten::select.int",
    ("diagonal", ""): "aten::diagonal",
    ("split", ""): "aten::split.Tensor",
    ("split", "list_args"): "aten::split_with_sizes",
    ("split_with_sizes", ""): "aten::split_with_sizes",
    ("chunk", ""): "aten::split.Tensor",
    ("unbind", ""): "aten::unbind.int",
    ("as_strided", ""): "aten::as_strided",
    ("__getitem__", ""): "aten::slice.Tensor / aten::select.int / aten::index.Tensor",
}

INDEX_OPS: dict[tuple[str, str], str] = {
    ("cat", ""): "aten::cat",
    ("stack", ""): "aten::stack / aten::cat",
    ("hstack", ""): "aten::cat",
    ("vstack", ""): "aten::cat",
    ("flip", ""): "aten::flip",
    ("fliplr", ""): "aten::flip",
    ("roll", ""): "aten::roll",
    ("constant_pad_nd", ""): "aten::constant_pad_nd",
    ("nn.functional.pad", "constant"): "aten::constant_pad_nd",
    ("repeat", ""): "aten::repeat",
    ("tril", ""): "aten::tril",
    ("triu", ""): "aten::triu",
    ("select_scatter", ""): "aten::select_scatter",
    ("slice_scatter", ""): "aten::slice_scatter",
    ("index_select", ""): "aten::index_select",
    ("gather", ""): "aten::gather",
    ("take_along_dim", ""): "aten::gather",
    ("nn.functional.embedding", ""): "aten::embedding",
}

# Writes at indexed positions (src/sched/scatter.h): one-node kernels that copy self, then store
# the source elements serially. scatter_reduce mean and include_self=False stay ATen calls.
SCATTER_OPS: dict[tuple[str, str], str] = {
    ("scatter", ""): "aten::scatter.src / aten::scatter.value",
    ("scatter_add", ""): "aten::scatter_add",
    ("scatter_reduce", "sum"): "aten::scatter_reduce.two",
    ("scatter_reduce", "prod"): "aten::scatter_reduce.two",
    ("scatter_reduce", "amax"): "aten::scatter_reduce.two",
    ("scatter_reduce", "amin"): "aten::scatter_reduce.two",
    ("index_put", ""): "aten::index_put",
    ("index_add", ""): "aten::index_add",
    ("index_copy", ""): "aten::index_copy",
    ("index_fill", ""): "aten::index_fill.int_Scalar",
}

OPS: dict[tuple[str, str], str] = {
    **POINTWISE_OPS, **REDUCTION_OPS, **VIEW_OPS, **INDEX_OPS, **SCATTER_OPS}

# The bounded subset CI runs (at most SAMPLES_PER_CASE samples per (op, dtype)): a representative
# op of each rule kind of the pointwise table and every reduction kernel.
CI_OPS: tuple[tuple[str, str], ...] = (
    ("add", ""),
    ("mul", ""),
    ("div", "no_rounding_mode"),
    ("div", "floor_rounding"),
    ("exp", ""),
    ("sigmoid", ""),
    ("abs", ""),
    ("round", ""),
    ("pow", ""),
    ("maximum", ""),
    ("clamp", ""),
    ("nn.functional.relu", ""),
    ("nn.functional.gelu", ""),
    ("nn.functional.silu", ""),
    ("lt", ""),
    ("logical_and", ""),
    ("rsub", ""),
    ("bitwise_and", ""),
    ("bitwise_left_shift", ""),
    ("where", ""),
    ("float", ""),
    ("lerp", ""),
    ("addcmul", ""),
    ("softmax", ""),
    ("log_softmax", ""),
    ("nn.functional.layer_norm", ""),
    ("nn.functional.group_norm", ""),
    ("nn.functional.batch_norm", ""),
    ("sum", ""),
    ("mean", ""),
    ("prod", ""),
    ("amax", ""),
    ("view", ""),
    ("permute", ""),
    ("transpose", ""),
    ("expand", ""),
    ("select", ""),
    ("narrow", ""),
    ("split", ""),
    ("__getitem__", ""),
    ("cat", ""),
    ("stack", ""),
    ("flip", ""),
    ("roll", ""),
    ("nn.functional.pad", "constant"),
    ("tril", ""),
    ("index_select", ""),
    ("gather", ""),
    ("nn.functional.embedding", ""),
    ("scatter_add", ""),
    ("index_put", ""),
    ("max", "reduction_with_dim"),
    ("argmax", ""),
    ("any", ""),
    ("var", ""),
    ("std_mean", ""),
    ("logsumexp", ""),
)

KINDS = ("pass", "fail", "fallback", "not_fused", "skip")

# (case id, [SampleResult]) of the cases run in this process (for pytest's terminal summary).
RECORDED: list = []


def full_sweep() -> bool:
    return os.environ.get("EMBER_OPINFO_FULL", "0") == "1"


def samples_per_case() -> int | None:
    """None: every sample."""
    if full_sweep():
        return None
    return int(os.environ.get("EMBER_OPINFO_SAMPLES", "3"))


def selected_ops(full: bool | None = None) -> tuple[tuple[str, str], ...]:
    if full is None:
        full = full_sweep()
    return tuple(OPS) if full else CI_OPS


def case_id(name: str, variant: str, dtype: torch.dtype) -> str:
    return f"{name}{'.' + variant if variant else ''}-{str(dtype).removeprefix('torch.')}"


_OPINFOS: dict[tuple[str, str], object] | None = None


def opinfos() -> dict[tuple[str, str], object]:
    """(name, variant) -> OpInfo, for the ops of OPS."""
    global _OPINFOS
    if _OPINFOS is None:
        found = {(op.name, op.variant_test_name): op for op in _import_op_db()}
        missing = [k for k in OPS if k not in found]
        if missing:
            raise LookupError(f"OpInfos missing from op_db: {missing}")
        _OPINFOS = {k: found[k] for k in OPS}
    return _OPINFOS


def cases(full: bool | None = None) -> list[tuple[str, str, torch.dtype]]:
    """(name, variant, dtype) for each selected op and each dtype of DTYPES it supports on CPU."""
    ops = opinfos()
    out = []
    for key in selected_ops(full):
        supported = ops[key].supported_dtypes("cpu")
        out.extend((key[0], key[1], d) for d in DTYPES if d in supported)
    return out


@dataclasses.dataclass
class SampleResult:
    index: int
    kind: str
    desc: str
    message: str = ""


def _describe(x) -> str:
    if isinstance(x, torch.Tensor):
        s = f"{str(x.dtype).removeprefix('torch.')}{list(x.shape)}"
        if x.dim() > 1 and not x.is_contiguous():
            s += f" strides={x.stride()}"
        return s
    if isinstance(x, (list, tuple)):
        inner = ", ".join(_describe(v) for v in x)
        return f"[{inner}]" if isinstance(x, list) else f"({inner})"
    return repr(x)


def describe_sample(sample) -> str:
    parts = [_describe(sample.input)] + [_describe(a) for a in sample.args]
    parts += [f"{k}={_describe(v)}" for k, v in sample.kwargs.items()]
    return f"({', '.join(parts)})"


@contextlib.contextmanager
def reduction_kernels_on():
    old = os.environ.get("EMBER_REDUCTION_KERNELS")
    os.environ["EMBER_REDUCTION_KERNELS"] = "1"
    try:
        yield
    finally:
        if old is None:
            del os.environ["EMBER_REDUCTION_KERNELS"]
        else:
            os.environ["EMBER_REDUCTION_KERNELS"] = old


def run_case(name: str, variant: str, dtype: torch.dtype, limit: int | None = None) -> list[SampleResult]:
    """Every (or the first `limit`) forward sample(s) of one (op, dtype), each classified."""
    from ember.testing import check_model

    op = opinfos()[(name, variant)]
    seed = zlib.crc32(case_id(name, variant, dtype).encode())
    torch.manual_seed(seed)  # sample_inputs draws from the global generator
    samples = op.sample_inputs("cpu", dtype, requires_grad=False)
    if limit is not None:
        samples = itertools.islice(samples, limit)
    samples = list(samples)

    def fn(*args, **kwargs):
        out = op.op(*args, **kwargs)
        return _cloned(out) if (name, variant) in VIEW_OPS else out

    results = []
    with reduction_kernels_on():
        for i, sample in enumerate(samples):
            desc = describe_sample(sample)
            args = (sample.input, *sample.args)
            try:
                with torch.no_grad():
                    op.op(*args, **sample.kwargs)
            except Exception as exc:  # noqa: BLE001
                results.append(SampleResult(i, "skip", desc, f"eager raised {type(exc).__name__}: {exc}"))
                continue
            try:
                stats = check_model(fn, args, sample.kwargs, no_grad=True, seed=seed)
            except Exception as exc:  # noqa: BLE001
                msg = f"{type(exc).__name__}: {exc}".strip()
                results.append(SampleResult(i, "fail", desc, msg))
                continue
            finally:
                torch._dynamo.reset()
            if stats.get("codegen_failures", 0) > 0:
                # The graph ran correctly without generated kernels, but a kernel ember generated
                # did not compile: an ember bug.
                results.append(SampleResult(i, "fail", desc, "a generated kernel failed to compile"))
            elif stats["fallbacks"] > 0:
                results.append(SampleResult(i, "fallback", desc, "; ".join(stats["fallback_reasons"])))
            elif stats["kernels"] == 0:
                results.append(SampleResult(i, "not_fused", desc, f"counters {dict(stats)}"))
            else:
                results.append(SampleResult(i, "pass", desc))
    return results


def _cloned(out):
    """`out` with every tensor cloned (see VIEW_OPS)."""
    if isinstance(out, torch.Tensor):
        return out.clone()
    if isinstance(out, (list, tuple)):
        return type(out)(_cloned(o) for o in out)
    return out


def tally(results: list[SampleResult]) -> dict[str, int]:
    out = {k: 0 for k in KINDS}
    for r in results:
        out[r.kind] += 1
    return out


def rates(counts: dict[str, int]) -> tuple[float, float]:
    """(correctness pass rate, fused rate) over the samples eager accepts."""
    n = sum(counts[k] for k in KINDS if k != "skip")
    if n == 0:
        return float("nan"), float("nan")
    ok = counts["pass"] + counts["not_fused"] + counts["fallback"]
    return ok / n, counts["pass"] / n
