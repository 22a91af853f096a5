"""Reduction kernels over shape symbols (issue 35): each reduction kind, traced with symbolic sizes,
compiles to one generated kernel whose loops run over the symbols (C++ on the CPU; Triton in
Triton's interpreter: the `target` parameter), and matches eager at sizes far from the hints the
kernel was laid out at: short rows, long rows (past the outer layout's block of 4096 elements and
the parallel threshold), one row, and inputs whose strides are symbolic (a transposed input).
docs/design/symbolic.md, "Symbolic sizes at run time, and in kernels"."""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

import ember._C as C


def _triton_target():
    import importlib.util
    ok = importlib.util.find_spec("triton") is not None and os.environ.get("TRITON_INTERPRET") == "1"
    return pytest.param("triton", marks=pytest.mark.skipif(not ok, reason="Triton's interpreter is off"))


TARGETS = pytest.mark.parametrize("target", ["cpp", _triton_target()])

# (rows, columns) of the calls: the trace sees (7, 16).
SHAPES = [(2, 2), (3, 7), (16, 17), (100, 5), (5, 300), (6000, 3), (3, 6000), (1000, 64)]

W = torch.randn(16)
B = torch.randn(16)

# name -> a function of x [s0, s1] with one reduction node (and pointwise ops around it).
CASES = {
    "sum_rows": lambda x: x.sum(-1),
    "sum_columns": lambda x: x.sum(0),  # the kept dim is the contiguous one: the outer layout
    "sum_all": lambda x: x.sum(),  # one row
    "mean_keepdim": lambda x: x - x.mean(1, keepdim=True),
    "mean_columns": lambda x: x.mean(0),
    "prod": lambda x: (x * 0.1 + 1).prod(-1),
    "amax": lambda x: x.amax(-1),
    "amin_columns": lambda x: x.amin(0),
    "argmax": lambda x: x.argmax(-1),
    "argmin_columns": lambda x: x.argmin(0),
    "max_dim": lambda x: x.max(-1),
    "any": lambda x: (x > 1.5).any(-1),
    "all_columns": lambda x: (x > -2.5).all(0),
    "var": lambda x: x.var(-1),
    "std_mean_columns": lambda x: torch.std_mean(x, 0, correction=0),
    "var_correction_2": lambda x: x.var(-1, correction=2),
    "logsumexp": lambda x: x.logsumexp(-1),
    "softmax": lambda x: x.softmax(-1),
    "softmax_columns": lambda x: x.softmax(0),
    "log_softmax": lambda x: x.log_softmax(-1),
    "masked_softmax": lambda x: (x * 0.5).masked_fill(x > 1.0, float("-inf")).softmax(-1),
    "bf16_softmax": lambda x: x.bfloat16().softmax(-1).float(),
    "transposed_sum": lambda x: x.t().sum(-1),  # symbolic strides: reduces the strided dim
    "transposed_softmax": lambda x: x.t().softmax(-1),
}


def _trace(fn, x, dims):
    s = C.TraceSession()
    inp = s.add_input(x, "user", "x", None, dims)
    with s, torch.no_grad():
        out = fn(inp)
    outs = list(out) if isinstance(out, tuple) else [out]
    return s.finish(outs)


def _check(cg, fn, shapes, make=lambda r, c: torch.randn(r, c), tol=2e-5):
    for r, c in shapes:
        x = make(r, c)
        got = cg(x)
        want = fn(x)
        want = list(want) if isinstance(want, tuple) else [want]
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape, ((r, c), g.shape, w.shape)
            torch.testing.assert_close(g, w, rtol=tol, atol=tol, equal_nan=True, msg=lambda m: f"{(r, c)}: {m}")
    assert cg.symbolic_fallback == "" and cg.num_specializations == 0  # compiled once


@TARGETS
@pytest.mark.parametrize("name", list(CASES))
def test_each_reduction_kind_is_one_kernel_over_the_symbols(name, target):
    fn = CASES[name]
    g = _trace(fn, torch.randn(7, 16), [0, 1])
    assert "s0" in str(g) and "s1" in str(g)
    cg = C.CompiledGraph(g, triton_interpret=target == "triton")
    assert cg.symbolic_fallback == ""
    # Scheduled as the static trace is: the reduction is a kernel (not an ATen call), with the
    # same prologue and epilogue.
    static = C.CompiledGraph(_trace(fn, torch.randn(7, 16), []), triton_interpret=target == "triton")
    assert cg.num_kernels == static.num_kernels
    assert cg.num_kernels >= 1 or target == "triton"  # Triton has no kernel for a few (argmin(0))
    _check(cg, fn, SHAPES if target == "cpp" else SHAPES[:5], tol=1e-2 if "bf16" in name else 2e-5)
    again = C.CompiledGraph(g, triton_interpret=target == "triton")
    assert again.kernel_sources == cg.kernel_sources  # deterministic


@TARGETS
def test_layer_norm_over_symbolic_rows_with_its_residual_as_prologue(target):
    w, b = W.clone(), B.clone()

    def fn(x):
        y = x * 2 + 1
        return F.layer_norm(y, (16,), w, b), y

    g = _trace(fn, torch.randn(7, 16), [0])
    cg = C.CompiledGraph(g, triton_interpret=target == "triton")
    assert cg.symbolic_fallback == "" and cg.num_kernels == 1
    _check(cg, fn, [(2, 16), (3, 16), (100, 16), (5000, 16)])


@TARGETS
def test_a_three_dim_softmax_over_two_symbols_with_an_epilogue(target):
    # The attention pattern: scores [B, s, s] scaled, masked by a causal mask and normalized.
    def fn(x):
        T = x.shape[-1]
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        att = (x * 0.25).masked_fill(~mask, float("-inf")).softmax(-1)
        return att * 3

    g = _trace(fn, torch.randn(3, 9, 9), [0, 1, 2])
    cg = C.CompiledGraph(g, triton_interpret=target == "triton")
    assert cg.symbolic_fallback == ""
    for b, t in [(2, 2), (3, 9), (4, 31), (2, 130)][: 4 if target == "cpp" else 3]:
        x = torch.randn(b, t, t)
        torch.testing.assert_close(cg(x)[0], fn(x), rtol=1e-5, atol=1e-5)
    assert cg.num_specializations == 0


def test_kernels_compiled_at_a_small_size_run_in_parallel_at_every_size():
    # Note [Parallel loops over symbols]: the hints (2 x 4 here) are far below the parallel
    # threshold, but the kernels run at every larger size too: their outer loops are parallel.
    def fn(x):
        return (x * 2).softmax(-1) + 1, x.sum(0)

    g = _trace(fn, torch.randn(2, 4), [0, 1])
    cg = C.CompiledGraph(g)
    assert cg.num_kernels >= 2
    for src in cg.kernel_sources:
        assert "#pragma omp parallel for" in src
    static = C.CompiledGraph(_trace(fn, torch.randn(2, 4), []))
    assert not any("#pragma omp parallel for" in src for src in static.kernel_sources)
    _check(cg, fn, [(2, 4), (300, 500)])


def test_a_reduction_over_a_symbolic_extent_takes_fewer_lanes_on_short_rows():
    # Note [Lanes over a symbolic extent]: the row loop is emitted for short rows (16 lanes of
    # f32) and long ones (64), in a branch on the extent; each matches eager on both sides of the
    # split (4 x 64 = 256 elements), through the cascade of the long form.
    def fn(x):
        return (x * 2).softmax(-1), x.sum(-1), x.amax(-1)

    cg = C.CompiledGraph(_trace(fn, torch.randn(7, 16), [0, 1]))
    src = "\n".join(cg.kernel_sources)
    assert "in 16 lanes" in src and "in 64 lanes" in src
    assert "< 256) {" in src
    static = C.CompiledGraph(_trace(fn, torch.randn(7, 300), []))
    assert "in 16 lanes" not in "\n".join(static.kernel_sources)  # a constant extent: one form
    _check(cg, fn, [(3, n) for n in (2, 15, 16, 17, 63, 64, 65, 255, 256, 257, 2048, 70000)],
           tol=1e-4)


@pytest.mark.parametrize("reduction", ["_softmax(%2, -1, False)", "sum.dim_IntList(%2, [1], False, dtype=None)"])
def test_a_reduction_over_a_reshape_of_a_computed_value(reduction):
    # A reshape over symbols is no index function: the reduction reads its realized root at the
    # view's geometry (it compiled per size: "the size s0*s1 is symbolic where a constant is
    # needed", OPT's decoder).
    out = "f32[s0*s1, 64]" if "softmax" in reduction else "f32[s0*s1]"
    text = f"""graph {{
  symbol s0 : [2, inf] hint 2 "L['x'].size()[0]"
  symbol s1 : [2, inf] hint 7 "L['x'].size()[1]"
  input %0 : f32[s0, s1, 64] cpu  # user x
  %1 : f32[s0, s1, 64] cpu = aten::mul.Tensor(%0, 2)
  %2 : f32[s0*s1, 64] cpu = aten::view(%1, [s0*s1, 64])
  %3 : {out} cpu = aten::{reduction}
  return (%3)
}}
"""
    cg = C.CompiledGraph(C.parse_traced_graph(text))
    assert cg.symbolic_fallback == "" and cg.num_specializations == 0, cg.symbolic_fallback
    for b, t in [(2, 7), (3, 5), (4, 33)]:
        x = torch.randn(b, t, 64)
        h = (x * 2).view(-1, 64)
        want = h.softmax(-1) if "softmax" in reduction else h.sum(1)
        torch.testing.assert_close(cg(x)[0], want)
