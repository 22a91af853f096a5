"""Graphs whose sizes are symbolic (issue 35): the executor binds each shape symbol from the call's
inputs and runs the graph correctly at every size in the symbol's range, compared here with eager
at many sizes. Graphs come from text (`_C.parse_traced_graph`), as the tracer will make them.

Where no step compiles a graph symbolically, the executor compiles it once per binding of its
symbols (`symbolic_fallback` says why): correct, never silently wrong."""

from __future__ import annotations

import pytest
import torch

import ember._C as C
from ember.errors import CompileError, Unsupported

SIZES = [2, 3, 7, 16, 17, 100]


def compiled(text: str, **kw):
    return C.CompiledGraph(C.parse_traced_graph(text), **kw)


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


def test_pointwise_at_many_sizes():
    cg = compiled(POINTWISE)
    check_sizes(cg, lambda n: (torch.randn(n, 16), torch.randn(16)),
                lambda x, b: torch.relu(x + b) * x)


def test_views_with_symbolic_arguments():
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
    cg = compiled(text)

    def ref(x):
        v = (-(x * x).view(-1)).view(x.shape[1], x.shape[0])
        return v, v.t() + x

    for m in [2, 3, 17]:
        check_sizes(cg, lambda n: (torch.randn(n, m),), ref, sizes=[2, 7, 16])


def test_reductions_at_many_sizes():
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
    cg = compiled(text)

    def ref(x):
        return torch.softmax(x, -1), x.sum(1), x.sum(0), x - x.mean(-1, keepdim=True)

    for m in [2, 5, 33]:
        check_sizes(cg, lambda n: (torch.randn(n, m),), ref)


def test_matmul_at_many_sizes():
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
    cg = compiled(text)
    w, b = torch.randn(16, 8), torch.randn(8)
    check_sizes(cg, lambda n: (torch.randn(n, 16), w, b), lambda x, w, b: torch.tanh(x @ w + b))


def test_slice_with_a_symbolic_bound():
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
    cg = compiled(text)

    def ref(x):
        h = x[:, : x.shape[1] // 2]
        return h * h, torch.exp(x[1:])

    for m in [2, 3, 9, 20]:
        check_sizes(cg, lambda n: (torch.randn(n, m),), ref, sizes=[2, 3, 17])


def test_each_binding_compiles_once():
    cg = compiled(POINTWISE)
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


def test_a_symbolic_kernel_with_two_symbols_and_broadcasts():
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
    cg = compiled(text)
    assert cg.symbolic_fallback == ""
    for n, m in [(2, 2), (3, 17), (100, 255), (7, 1000), (1000, 3)]:
        x, y, z = torch.randn(n, m), torch.randn(n, 1), torch.randn(m)
        got = cg(x, y, z)
        torch.testing.assert_close(got[0], torch.sigmoid((x - y) * z))
        torch.testing.assert_close(got[1], x - y)
    assert cg.num_specializations == 0


def test_inputs_with_other_strides_run_the_program_of_their_sizes():
    cg = compiled(POINTWISE)
    x = torch.randn(16, 9).t()  # [9, 16], strides (1, 9)
    b = torch.randn(16)
    torch.testing.assert_close(cg(x, b)[0], torch.relu(x + b) * x)
    assert cg.num_specializations == 1


def test_graphs_beyond_pointwise_fall_back_naming_the_step():
    text = """graph {
  symbol s0 : [2, inf] hint 7 "L['x'].size()[0]"
  input %0 : f32[s0, 16] cpu  # user x
  %1 : f32[s0, 16] cpu = aten::_softmax(%0, -1, False)
  return (%1)
}
"""
    cg = compiled(text)
    assert cg.symbolic_fallback.startswith("compiled per size: schedule: aten::_softmax")
    x = torch.randn(5, 16)
    torch.testing.assert_close(cg(x)[0], torch.softmax(x, -1))
