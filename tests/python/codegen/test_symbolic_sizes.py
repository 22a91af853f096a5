"""Graphs whose sizes are symbolic (issue 35): the executor binds each shape symbol from the call's
inputs and runs the graph correctly at every size in the symbol's range, compared here with eager
at many sizes. Graphs come from text (`_C.parse_traced_graph`), as the tracer will make them.

Graphs compile once for every size: pointwise groups and reductions become kernels over the
symbols (C++ on the CPU; Triton kernels, which take the symbols as i64 arguments, run here in
Triton's interpreter: the `target` parameter; reductions in detail: test_symbolic_reductions.py),
views are read through or made from their root (test_symbolic_views.py), every other node (matrix
products, embedding, ...) an ATen call whose symbolic arguments are
evaluated per call. Where a step cannot handle symbols, the
executor compiles the graph once per binding of its symbols (`symbolic_fallback` says why):
correct, never silently wrong."""

from __future__ import annotations

import math
import os

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import ember._C as C
from ember.errors import CompileError, Unsupported

SIZES = [2, 3, 7, 16, 17, 100]


def compiled(text: str, target: str = "cpp", **kw):
    if target == "triton":
        kw["triton_interpret"] = True
    return C.CompiledGraph(C.parse_traced_graph(text), **kw)


def _triton_target():
    # Triton's interpreter runs where tests/python/conftest.py set TRITON_INTERPRET (no GPU).
    import importlib.util
    ok = importlib.util.find_spec("triton") is not None and os.environ.get("TRITON_INTERPRET") == "1"
    return pytest.param("triton", marks=pytest.mark.skipif(not ok, reason="Triton's interpreter is off"))


TARGETS = pytest.mark.parametrize("target", ["cpp", _triton_target()])


def check_sizes(cg, make_inputs, reference, sizes=SIZES):
    for n in sizes:
        inputs = make_inputs(n)
        got = cg(*inputs)
        want = reference(*inputs)
        want = want if isinstance(want, tuple) else (want,)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape, (n, g.shape, w.shape)
            assert g.stride() == w.stride() or not g.is_contiguous() or not w.is_contiguous()
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
    assert cg.symbolic_fallback == "" and cg.num_specializations == 0  # compiled once


POINTWISE = """graph {
  symbol s0 : [2, inf] hint 7 "L['x'].size()[0]"
  input %0 : f32[s0, 16] cpu  # user x
  input %1 : f32[16] cpu  # user b
  %2 : f32[s0, 16] cpu = aten::add.Tensor(%0, %1, alpha=1)
  %3 : f32[s0, 16] cpu = aten::relu(%2)
  %4 : f32[s0, 16] cpu = aten::mul.Tensor(%3, %0)
  return (%4)
}
"""


def test_parse_traced_graph_reads_symbols_and_prints_them_back():
    g = C.parse_traced_graph(POINTWISE)
    assert C.reprint_graph_text(POINTWISE) == str(g)
    assert "symbol s0 : [2, inf] hint 7" in str(g)
    assert g.num_inputs == 2 and g.num_nodes == 3


def test_parse_traced_graph_refuses_constant_inputs():
    text = """graph {
  const %0 : f32[4] cpu  # c
  input %1 : f32[4] cpu  # user x
  %2 : f32[4] cpu = aten::add.Tensor(%1, %0, alpha=1)
  return (%2)
}
"""
    with pytest.raises(CompileError, match="const"):
        C.parse_traced_graph(text)


def test_a_static_graph_from_text_runs_as_a_traced_one():
    text = """graph {
  input %0 : f32[8, 16] cpu  # user x
  %1 : f32[8, 16] cpu = aten::_softmax(%0, -1, False)
  %2 : f32[8] cpu = aten::sum.dim_IntList(%1, [1], False, dtype=None)
  return (%1, %2)
}
"""
    cg = compiled(text)
    assert cg.symbolic_fallback == ""
    assert cg.num_kernels >= 1
    x = torch.randn(8, 16)
    y = torch.softmax(x, -1)
    got = cg(x)
    torch.testing.assert_close(got[0], y)
    torch.testing.assert_close(got[1], y.sum(1))


@TARGETS
def test_pointwise_at_many_sizes(target):
    cg = compiled(POINTWISE, target)
    check_sizes(cg, lambda n: (torch.randn(n, 16), torch.randn(16)),
                lambda x, b: torch.relu(x + b) * x)


@TARGETS
def test_views_with_symbolic_arguments(target):
    text = """graph {
  symbol s0 : [2, inf] hint 5 "L['x'].size()[0]"
  symbol s1 : [2, inf] hint 6 "L['x'].size()[1]"
  input %0 : f32[s0, s1] cpu  # user x
  %1 : f32[s0, s1] cpu = aten::mul.Tensor(%0, %0)
  %2 : f32[s0*s1] cpu = aten::view(%1, [s0*s1])
  %3 : f32[s0*s1] cpu = aten::neg(%2)
  %4 : f32[s1, s0] cpu = aten::view(%3, [s1, s0])
  %5 : f32[s0, s1]{1, s0} cpu = aten::t(%4)
  %6 : f32[s0, s1] cpu = aten::add.Tensor(%5, %0, alpha=1)
  return (%4, %6)
}
"""
    cg = compiled(text, target)

    def ref(x):
        v = (-(x * x).view(-1)).view(x.shape[1], x.shape[0])
        return v, v.t() + x

    for m in [2, 3, 17]:
        check_sizes(cg, lambda n: (torch.randn(n, m),), ref, sizes=[2, 7, 16])


@TARGETS
def test_reductions_at_many_sizes(target):
    text = """graph {
  symbol s0 : [2, inf] hint 7 "L['x'].size()[0]"
  symbol s1 : [2, inf] hint 16 "L['x'].size()[1]"
  input %0 : f32[s0, s1] cpu  # user x
  %1 : f32[s0, s1] cpu = aten::_softmax(%0, -1, False)
  %2 : f32[s0] cpu = aten::sum.dim_IntList(%0, [1], False, dtype=None)
  %3 : f32[s1] cpu = aten::sum.dim_IntList(%0, [0], False, dtype=None)
  %4 : f32[s0, 1] cpu = aten::mean.dim(%0, [-1], True, dtype=None)
  %5 : f32[s0, s1] cpu = aten::sub.Tensor(%0, %4, alpha=1)
  return (%1, %2, %3, %5)
}
"""
    cg = compiled(text, target)

    def ref(x):
        return torch.softmax(x, -1), x.sum(1), x.sum(0), x - x.mean(-1, keepdim=True)

    for m in [2, 5, 33]:
        check_sizes(cg, lambda n: (torch.randn(n, m),), ref)


@TARGETS
def test_matmul_at_many_sizes(target):
    text = """graph {
  symbol s0 : [2, inf] hint 7 "L['x'].size()[0]"
  input %0 : f32[s0, 16] cpu  # user x
  input %1 : f32[16, 8] cpu  # param w
  input %2 : f32[8] cpu  # param b
  %3 : f32[s0, 8] cpu = aten::mm(%0, %1)
  %4 : f32[s0, 8] cpu = aten::add.Tensor(%3, %2, alpha=1)
  %5 : f32[s0, 8] cpu = aten::tanh(%4)
  return (%5)
}
"""
    cg = compiled(text, target)
    w, b = torch.randn(16, 8), torch.randn(8)
    check_sizes(cg, lambda n: (torch.randn(n, 16), w, b), lambda x, w, b: torch.tanh(x @ w + b))


def test_intermediates_share_an_arena_planned_per_call():
    """Note [An arena over shape symbols]: kernel outputs that live inside a call take slots of
    one arena whose layout is planned per call at the call's sizes. Outputs are never in it: one
    returned by a call keeps its values through later calls at other sizes (which may grow the
    arena or reuse the last plan)."""
    text = """graph {
  symbol s0 : [2, inf] hint 7 "L['x'].size()[0]"
  input %0 : f32[s0, 16] cpu  # user x
  input %1 : f32[16, 16] cpu  # param w
  %2 : f32[s0, 16] cpu = aten::sin(%0)
  %3 : f32[s0, 16] cpu = aten::mm(%2, %1)
  %4 : f32[s0, 16] cpu = aten::cos(%3)
  %5 : f32[s0, 16] cpu = aten::mm(%4, %1)
  %6 : f32[s0, 16] cpu = aten::tanh(%5)
  %7 : f32[s0, 16] cpu = aten::mm(%6, %1)
  %8 : f32[s0, 16] cpu = aten::relu(%7)
  return (%8)
}
"""
    cg = compiled(text)
    assert cg.num_arena_buffers >= 2 and cg.arena_per_call and cg.arena_bytes == 0
    w = torch.randn(16, 16) / 4

    def ref(x):
        return torch.relu(torch.tanh(torch.cos(torch.sin(x) @ w) @ w) @ w)

    kept = []
    for n in [7, 7, 3, 100, 7, 2, 100]:
        x = torch.randn(n, 16)
        out = cg(x, w)[0]
        torch.testing.assert_close(out, ref(x))
        kept.append((out, out.clone()))
    for out, copy in kept:
        assert torch.equal(out, copy)
    assert cg.symbolic_fallback == "" and cg.num_specializations == 0


@TARGETS
def test_slice_with_a_symbolic_bound(target):
    text = """graph {
  symbol s0 : [2, inf] hint 7 "L['x'].size()[0]"
  symbol s1 : [2, inf] hint 10 "L['x'].size()[1]"
  input %0 : f32[s0, s1] cpu  # user x
  %1 : f32[s0, (s1 // 2)]{s1, 1} cpu = aten::slice.Tensor(%0, 1, 0, (s1 // 2), 1)
  %2 : f32[s0 - 1, s1]+(s1) cpu = aten::slice.Tensor(%0, 0, 1, s0, 1)
  %3 : f32[s0, (s1 // 2)] cpu = aten::mul.Tensor(%1, %1)
  %4 : f32[s0 - 1, s1] cpu = aten::exp(%2)
  return (%3, %4)
}
"""
    cg = compiled(text, target)

    def ref(x):
        h = x[:, : x.shape[1] // 2]
        return h * h, torch.exp(x[1:])

    for m in [2, 3, 9, 20]:
        check_sizes(cg, lambda n: (torch.randn(n, m),), ref, sizes=[2, 3, 17])


@TARGETS
def test_each_binding_compiles_once(target):
    cg = compiled(POINTWISE, target)
    assert cg.is_symbolic
    b = torch.randn(16)
    for n in [3, 5, 3, 5, 3]:
        cg(torch.randn(n, 16), b)
    if cg.symbolic_fallback:  # compiled per size: once per binding
        assert cg.num_specializations == 2
    else:  # symbolic kernels: compiled once
        assert cg.num_specializations == 0


def test_sizes_that_contradict_the_types_raise_a_user_error():
    text = """graph {
  symbol s0 : [2, inf] hint 7 "L['x'].size()[0]"
  input %0 : f32[s0, 16] cpu  # user x
  input %1 : f32[s0] cpu  # user y
  %2 : f32[s0, 16] cpu = aten::mul.Scalar(%0, 2)
  %3 : f32[s0] cpu = aten::add.Tensor(%1, %1, alpha=1)
  return (%2, %3)
}
"""
    cg = compiled(text)
    x = torch.randn(5, 16)
    torch.testing.assert_close(cg(x, torch.ones(5))[1], torch.full((5,), 2.0))
    with pytest.raises(CompileError, match=r"input 1 has size \[6\]") as e:
        cg(x, torch.ones(6))
    assert not isinstance(e.value, Unsupported)
    with pytest.raises(CompileError, match=r"input 0 has size \[5, 15\]"):
        cg(torch.randn(5, 15), torch.ones(5))
    with pytest.raises(CompileError, match=r"symbol s0"):  # outside its range [2, inf]
        cg(torch.randn(1, 16), torch.ones(1))
    with pytest.raises(CompileError, match="dims"):
        cg(torch.randn(5, 16, 1), torch.ones(5))


def test_pointwise_graphs_get_one_symbolic_kernel():
    cg = compiled(POINTWISE)
    assert cg.symbolic_fallback == ""
    assert cg.num_kernels == 1 and cg.num_extern_steps == 0
    (source,) = cg.kernel_sources
    assert "const int64_t s_s0 = sizes[0];" in source or "sizes[0]" in source
    b = torch.randn(16)
    for n in [2, 3, 7, 16, 17, 100, 255]:
        x = torch.randn(n, 16)
        torch.testing.assert_close(cg(x, b)[0], torch.relu(x + b) * x)
    assert cg.num_specializations == 0  # compiled once, not once per size
    # Deterministic: the same graph gives byte-identical code.
    assert compiled(POINTWISE).kernel_sources == cg.kernel_sources


@TARGETS
def test_a_symbolic_kernel_with_two_symbols_and_broadcasts(target):
    text = """graph {
  symbol s0 : [2, inf] hint 40 "L['x'].size()[0]"
  symbol s1 : [2, inf] hint 900 "L['x'].size()[1]"
  input %0 : f32[s0, s1] cpu  # user x
  input %1 : f32[s0, 1] cpu  # user y
  input %2 : f32[s1] cpu  # user z
  %3 : f32[s0, s1] cpu = aten::sub.Tensor(%0, %1, alpha=1)
  %4 : f32[s0, s1] cpu = aten::mul.Tensor(%3, %2)
  %5 : f32[s0, s1] cpu = aten::sigmoid(%4)
  return (%5, %3)
}
"""
    cg = compiled(text, target)
    assert cg.symbolic_fallback == ""
    for n, m in [(2, 2), (3, 17), (100, 255), (7, 1000), (1000, 3)]:
        x, y, z = torch.randn(n, m), torch.randn(n, 1), torch.randn(m)
        got = cg(x, y, z)
        torch.testing.assert_close(got[0], torch.sigmoid((x - y) * z))
        torch.testing.assert_close(got[1], x - y)
    assert cg.num_specializations == 0


@TARGETS
def test_inputs_with_other_strides_run_the_program_of_their_sizes(target):
    cg = compiled(POINTWISE, target)
    x = torch.randn(16, 9).t()  # [9, 16], strides (1, 9)
    b = torch.randn(16)
    torch.testing.assert_close(cg(x, b)[0], torch.relu(x + b) * x)
    assert cg.num_specializations == 1


@TARGETS
def test_triton_kernels_take_the_symbols_as_arguments(target):
    if target == "cpp":
        pytest.skip("Triton only")
    cg = compiled(POINTWISE, target)
    assert cg.symbolic_fallback == "" and cg.num_kernels == 1
    (source,) = cg.kernel_sources
    (signature,) = [line for line in source.splitlines() if line.startswith("def ember_")]
    assert "s_s0" in signature  # an argument
    b = torch.randn(16)
    for n in [2, 3, 1000, 5]:  # its block was chosen at the hint (7): any size runs
        x = torch.randn(n, 16)
        torch.testing.assert_close(cg(x, b)[0], torch.relu(x + b) * x)
    assert cg.num_specializations == 0
    assert compiled(POINTWISE, target).kernel_sources == cg.kernel_sources  # deterministic


MIXED = """graph {
  symbol s0 : [2, inf] hint 7 "L['x'].size()[0]"
  symbol s1 : [2, inf] hint 16 "L['x'].size()[1]"
  input %0 : f32[s0, s1, 8] cpu  # user x
  input %1 : f32[8, 8] cpu  # param w
  input %2 : f32[8] cpu  # param b
  %3 : f32[s0*s1, 8] cpu = aten::view(%0, [s0*s1, 8])
  %4 : f32[s0*s1, 8] cpu = aten::addmm(%2, %3, %1, beta=1, alpha=1)
  %5 : f32[s0, s1, 8] cpu = aten::view(%4, [s0, s1, 8])
  %6 : f32[s0, s1, 8] cpu = aten::tanh(%5)
  %7 : f32[s0, s1, 8] cpu = aten::add.Tensor(%6, %0, alpha=1)
  %8 : f32[s0, s1, 8] cpu = aten::_softmax(%7, -1, False)
  %9 : f32[s0, s1, 8] cpu = aten::mul.Tensor(%8, 2)
  return (%9, %7)
}
"""


@TARGETS
def test_extern_calls_with_symbolic_arguments_between_symbolic_kernels(target):
    cg = compiled(MIXED, target)
    assert cg.symbolic_fallback == ""
    # One reduction kernel: tanh + add computed inline and stored (a stored prologue), the
    # softmax, and the scaling after it as an epilogue.
    assert cg.num_kernels == 1
    w, b = torch.randn(8, 8), torch.randn(8)

    def ref(x, w, b):
        y = torch.tanh(x.reshape(-1, 8) @ w + b).view(x.shape) + x
        return torch.softmax(y, -1) * 2, y

    for m in [2, 3, 17, 64]:
        check_sizes(cg, lambda n: (torch.randn(n, m, 8), w, b), ref, sizes=[2, 7, 16, 255])
    assert compiled(MIXED, target).kernel_sources == cg.kernel_sources  # deterministic


@TARGETS
def test_symbolic_kernels_read_extern_results_in_another_layout(target):
    # The transpose's result is read by a kernel at its symbolic strides.
    text = """graph {
  symbol s0 : [2, inf] hint 5 "L['x'].size()[0]"
  symbol s1 : [2, inf] hint 6 "L['x'].size()[1]"
  input %0 : f32[s0, s1] cpu  # user x
  %1 : f32[s1, s0]{1, s1} cpu = aten::transpose.int(%0, 0, 1)
  %2 : f32[s1, s0] cpu = aten::exp(%1)
  %3 : f32[s1] cpu = aten::sum.dim_IntList(%2, [1], False, dtype=None)
  return (%2, %3)
}
"""
    cg = compiled(text, target)
    assert cg.num_kernels == 1 and "(symbolic)" in " ".join(cg.describe_steps())
    for m in [2, 9, 100]:
        check_sizes(cg, lambda n: (torch.randn(n, m),), lambda x: (x.t().exp(), x.t().exp().sum(1)))


@TARGETS
def test_independent_kernels_over_symbols_run_as_one_combo_kernel(target):
    # Two pointwise kernels over sizes of different symbols, neither reading the other, are parts
    # of one combo kernel over both symbols (sched/combo.h): on Triton one launch whose programs
    # are split among the parts at each call's sizes.
    text = """graph {
  symbol s0 : [2, inf] hint 5 "L['x'].size()[0]"
  symbol s1 : [2, inf] hint 6 "L['y'].size()[0]"
  input %0 : f32[s0, 3] cpu  # user x
  input %1 : f32[s1] cpu  # user y
  %2 : f32[s0, 3] cpu = aten::mul.Tensor(%0, %0)
  %3 : f32[s1] cpu = aten::exp(%1)
  return (%2, %3)
}
"""
    cg = compiled(text, target)
    steps = " ".join(cg.describe_steps())
    assert cg.num_kernels == 1 and "(combo of 2) (symbolic)" in steps, steps
    for n, m in [(5, 6), (2, 300), (1000, 2)]:
        x, y = torch.randn(n, 3), torch.randn(m)
        got = cg(x, y)
        torch.testing.assert_close(got[0], x * x)
        torch.testing.assert_close(got[1], y.exp())
    assert cg.symbolic_fallback == "" and cg.num_specializations == 0


# A language model's prologue over symbolic batch and length: token embeddings, positions from
# an arange, a rotary-style cat along a constant dim, a cat along the symbolic length, a mask of
# ones. These index functions hold over symbols (sched/index_ops_internal.h, Rule::symbolic).
INDEXING = """graph {
  symbol s0 : [2, inf] hint 2 "L['ids'].size()[0]"
  symbol s1 : [2, inf] hint 5 "L['ids'].size()[1]"
  input %0 : i64[s0, s1] cpu  # user L['ids']
  input %1 : f32[s0, s1, 8] cpu  # user L['x']
  input %3 : f32[100, 8] cpu  # param emb
  %2 : i64[s1] cpu = aten::arange(s1, dtype=None, layout=None, device=cpu, pin_memory=False)
  %4 : f32[s0, s1, 8] cpu = aten::embedding(%3, %0, -1, False, False)
  %5 : i64[1, s1] cpu = aten::unsqueeze(%2, 0)
  %6 : i64[1, s1] cpu = aten::slice.Tensor(%5, 1, 0, 9223372036854775807, 1)
  %7 : i64[1, s1, 1] cpu = aten::unsqueeze(%6, 2)
  %8 : f32[1, s1, 1] cpu = aten::_to_copy(%7, dtype=f32, layout=None, device=None, pin_memory=None, non_blocking=False, memory_format=None)
  %9 : f32[s0, s1, 8] cpu = aten::add.Tensor(%4, %8, alpha=1)
  %10 : f32[s0, s1, 4]{s1*8, 8, 1} cpu = aten::slice.Tensor(%1, 2, 0, 4, 1)
  %11 : f32[s0, s1, 4]{s1*8, 8, 1}+4 cpu = aten::slice.Tensor(%1, 2, 4, 9223372036854775807, 1)
  %12 : f32[s0, s1, 4] cpu = aten::neg(%11)
  %13 : f32[s0, s1, 8] cpu = aten::cat([%12, %10], -1)
  %14 : i64[s0, s1] cpu = aten::new_ones(%0, [s0, s1], dtype=None, layout=None, device=None, pin_memory=False)
  %15 : f32[s0, s1, 8] cpu = aten::exp(%1)
  %16 : f32[s0, s1*2, 8] cpu = aten::cat([%1, %15], 1)
  %17 : f32[s0, s1, 8] cpu = aten::mul.Tensor(%9, %13)
  return (%17, %14, %16)
}
"""


def _indexing_reference(ids, x, emb):
    pos = torch.arange(ids.shape[1])[None, :, None].float()
    rot = torch.cat((-x[..., 4:], x[..., :4]), dim=-1)
    return ((emb[ids] + pos) * rot, torch.ones_like(ids), torch.cat([x, x.exp()], dim=1))


@TARGETS
def test_cat_embedding_and_factories_over_symbols_are_kernels(target):
    cg = compiled(INDEXING, target)
    steps = cg.describe_steps()
    assert not any(s.startswith("extern") for s in steps), steps
    emb = torch.randn(100, 8)
    for B, T in [(2, 5), (3, 9), (2, 40)]:
        ids, x = torch.randint(0, 100, (B, T)), torch.randn(B, T, 8)
        for g, w in zip(cg(ids, x, emb), _indexing_reference(ids, x, emb)):
            torch.testing.assert_close(g, w)
    assert cg.symbolic_fallback == "" and cg.num_specializations == 0
    if target == "cpp":
        # An id out of range: eager's error (the kernel's index check falls back to ATen).
        ids = torch.randint(0, 100, (3, 9))
        ids[1, 4] = 100
        with pytest.raises(IndexError):
            cg(ids, torch.randn(3, 9, 8), emb)


class _Block(nn.Module):
    """A GPT-2-style block: token and position embeddings, pre-norm causal self-attention (bmm,
    softmax, a mask from arange), tanh-GELU MLP, residual adds, dropout (eval)."""

    def __init__(self, C=32, H=4, T=128, V=50):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.q, self.k, self.v, self.proj = (nn.Linear(C, C) for _ in range(4))
        self.fc, self.fc2 = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        self.drop, self.H = nn.Dropout(0.1), H

    def forward(self, idx):
        B, T = idx.shape
        pos = torch.arange(0, T, dtype=torch.long)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        C, H = x.shape[-1], self.H
        h = self.ln1(x)
        q, k, v = (f(h).view(B, T, H, C // H).transpose(1, 2) for f in (self.q, self.k, self.v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))
        att = torch.where(pos[None, :] <= pos[:, None], att, torch.tensor(float("-inf")))
        y = (F.softmax(att, dim=-1) @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.drop(self.proj(y))
        return x + self.fc2(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


def _trace_symbolic(fn, x, dynamic):
    s = C.TraceSession()
    inp = s.add_input(x, "user", "idx", None, dynamic)
    with s:
        out = fn(inp)
    return s.finish([out])


@TARGETS
def test_a_gpt2_block_traced_with_symbolic_batch_and_length_compiles_once(target):
    torch.manual_seed(0)
    block = _Block().eval()
    with torch.no_grad():
        g = _trace_symbolic(block, torch.randint(0, 50, (3, 7)), [0, 1])
    assert C.size_guards(g) == [] or all("<" in guard for guard in C.size_guards(g))
    cg = C.CompiledGraph(g, triton_interpret=target == "triton")
    assert cg.symbolic_fallback == ""
    kernels = cg.num_kernels
    assert kernels >= 4  # embeddings' sum, mask + scale, gelu, residual adds
    for B, T in [(2, 2), (3, 7), (2, 16), (5, 17), (2, 64), (3, 100), (2, 128)]:
        idx = torch.randint(0, 50, (B, T))
        with torch.no_grad():
            torch.testing.assert_close(cg(idx)[0], block(idx), rtol=1e-4, atol=1e-4)
    assert cg.num_specializations == 0  # one compile for every size
    assert cg.num_kernels == kernels
    assert C.CompiledGraph(g, triton_interpret=target == "triton").kernel_sources == cg.kernel_sources  # deterministic


def test_calls_at_many_sizes_in_turn_use_each_sizes_layouts():
    # Note [Layouts per binding]: each binding's layouts (kernels', views' and the arena's plan)
    # are kept for the last 8 bindings. Calls cycling through more sizes than that, and back,
    # evict and make them again; each call gets its own sizes' layouts and arena.
    def fn(x, b):
        y = torch.relu(x + b)
        z = y.view(x.shape[0], 4, 4).transpose(1, 2).reshape(x.shape[0], 16) * 2
        return z.softmax(-1) + y.sum(-1, keepdim=True)

    s = C.TraceSession()
    x0, b0 = torch.randn(7, 16), torch.randn(16)
    xi = s.add_input(x0, "user", "x", None, [0])
    bi = s.add_input(b0, "user", "b", None, [])
    with s, torch.no_grad():
        out = fn(xi, bi)
    cg = C.CompiledGraph(s.finish([out]))
    assert cg.symbolic_fallback == ""
    assert cg.arena_per_call and cg.num_arena_buffers >= 1, cg.describe_steps()
    sizes = [2, 3, 5, 9, 17, 33, 65, 129, 257, 513, 1025]  # 11 bindings, more than kept
    for n in sizes + sizes[::-1] + sizes:
        x, b = torch.randn(n, 16), torch.randn(16)
        torch.testing.assert_close(cg(x, b)[0], fn(x, b), rtol=1e-5, atol=1e-5)
    assert cg.num_specializations == 0


def _mask_gather(mask, x):
    # transformers' packed-sequence masks: a padding mask gathered at arange-derived batch and
    # key indices (index.Tensor with broadcast index tensors), and a row gather by token ids.
    B, T = mask.shape
    b = torch.arange(B)[:, None, None]
    kv = torch.arange(T)[None, None, :]
    q = torch.arange(T)[None, :, None]
    allowed = mask.bool()[b, kv] & (kv <= q)
    rows = x[torch.arange(T)]  # a [T, 8] gather of x (its own length: another symbol)
    return allowed, rows * 2


@TARGETS
def test_index_tensor_over_symbols_is_a_kernel_with_symbolic_bounds(target):
    # index.Tensor's index function over size expressions: each index is checked against its
    # dim's size as an expression (the kernel's range check over symbols), and the node is a
    # kernel, not an ATen call, at every size.
    s = C.TraceSession()
    mask = s.add_input(torch.ones(2, 7, dtype=torch.long), "user", "mask", None, [0, 1])
    x = s.add_input(torch.randn(7, 8), "user", "x", None, [0])
    with s:
        outs = _mask_gather(mask, x)
    g = s.finish(list(outs))
    cg = C.CompiledGraph(g, triton_interpret=target == "triton")
    steps = cg.describe_steps()
    assert not any(st.startswith("extern") for st in steps), steps
    for B, T in [(2, 3), (3, 7), (4, 40)]:
        m, xx = torch.randint(0, 2, (B, T)), torch.randn(T, 8)
        for got, want in zip(cg(m, xx), _mask_gather(m, xx)):
            torch.testing.assert_close(got, want)
    assert cg.symbolic_fallback == "" and cg.num_specializations == 0
    if target == "cpp":
        # An index past a symbolic size (x shorter than the mask's length): eager's error.
        with pytest.raises(IndexError):
            cg(torch.ones(2, 5, dtype=torch.long), torch.randn(3, 8))
