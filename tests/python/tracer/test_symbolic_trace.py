"""Tracing with symbolic sizes (issue 35): inputs with dynamic dims get shape symbols, results get
types as expressions over them (graph/shape_rules.h), and the size relations the trace relied on
become size guards (sym/guard.h)."""

import pytest
import torch
import torch.nn.functional as F

import ember
from ember import _C


def trace(fn, *inputs, dynamic):
    """Traces fn on tracer tensors for `inputs`, dims `dynamic[i]` of input i symbolic."""
    s = _C.TraceSession()
    ins = [s.add_input(x, "user", f"x{i}", None, d) for i, (x, d) in enumerate(zip(inputs, dynamic))]
    try:
        with s:
            out = fn(*ins)
    except RuntimeError:
        s.rethrow_pending_error()  # ember's own error, with its type
        raise
    return s.finish(list(out) if isinstance(out, (tuple, list)) else [out])


def lines(g):
    return [line.strip() for line in str(g).splitlines()]


def test_a_block_of_a_transformer_is_symbolic_end_to_end():
    def block(x, b):
        B, T, C = x.shape
        y = (x + b).view(B * T, C)
        y = F.layer_norm(y, (C,))
        return y.softmax(-1).view(B, T, C).sum(1), x[:, : T - 1]

    g = trace(block, torch.randn(3, 7, 16), torch.randn(16), dynamic=[[0, 1], []])
    text = lines(g)
    assert 'symbol s0 : [2, inf] hint 3 "x0.size()[0]"' in text
    assert 'symbol s1 : [2, inf] hint 7 "x0.size()[1]"' in text
    assert "input %0 : f32[s0, s1, 16] cpu  # user x0" in text
    assert "%3 : f32[s0*s1, 16] cpu = aten::view(%2, [s0*s1, 16])" in text
    assert "%9 : f32[s0, 16] cpu = aten::sum.dim_IntList(%8, [1], False, dtype=None)" in text
    assert any(l.startswith("%11 : f32[s0, s1 - 1, 16]{s1*16, 16, 1} cpu = aten::slice") for l in text)
    # Nothing here needed a decision the ranges do not give.
    assert _C.size_guards(g) == []
    # The text form parses back as it printed.
    assert _C.reprint_graph_text(str(g)) == str(g)


def test_branches_on_sizes_become_guards():
    def f(x):
        if x.shape[0] > 4:
            return x * 2
        return x + 1

    g = trace(f, torch.randn(6, 3), dynamic=[[0]])
    assert _C.size_guards(g) == ["s0 > 4"]
    assert "aten::mul.Tensor" in str(g)
    g = trace(f, torch.randn(3, 3), dynamic=[[0]])
    assert _C.size_guards(g) == ["not (s0 > 4)"]


def test_a_size_used_as_a_python_int_is_specialized():
    def f(x):
        return x.new_zeros(int(x.shape[0]) * 2)

    g = trace(f, torch.randn(5), dynamic=[[0]])
    assert _C.size_guards(g) == ["s0 == 5"]


def test_broadcasting_two_symbols_guards_their_equality():
    g = trace(lambda a, b: a + b, torch.randn(4, 3), torch.randn(4, 3), dynamic=[[0], [0]])
    assert _C.size_guards(g) == ["s0 == s1"]
    assert "f32[s0, 3]" in str(g)


def test_sizes_0_and_1_stay_constants():
    g = trace(lambda x: x * 2, torch.randn(1, 5), dynamic=[[0, 1]])
    text = str(g)
    assert "symbol s0 : [2, inf] hint 5" in text
    assert "input %0 : f32[1, s0] cpu" in text


def test_factories_and_attention_shapes_follow_the_symbols():
    def f(q, k, v):
        T = q.shape[2]
        pos = torch.arange(T)
        out = F.scaled_dot_product_attention(q, k, v)
        return out.transpose(1, 2).reshape(q.shape[0], T, -1), pos

    q = torch.randn(2, 4, 9, 8)
    g = trace(f, q, torch.randn_like(q), torch.randn_like(q), dynamic=[[2], [2], [2]])
    text = str(g)
    assert "aten::arange" in text and "i64[s0]" in text
    assert "f32[2, s0, 32]" in text


def test_an_op_without_a_rule_is_unsupported_with_its_name():
    with pytest.raises(ember.Unsupported, match="aten::histc has no symbolic shape rule"):
        trace(lambda x: x.histc(bins=4) * 2, torch.randn(5), dynamic=[[0]])


def test_size_guards_are_checked_against_a_call():
    g = trace(lambda x: x[:, :3] * 2, torch.randn(2, 8), dynamic=[[1]])
    assert _C.size_guards(g) == ["not (3 > s0)"]
    cg = _C.CompiledGraph(g)
    assert cg.size_guards_hold([torch.randn(2, 5)])
    assert cg.size_guards_hold([torch.randn(2, 3)])  # x[:, :3] of 3 columns: the same slice
    assert not cg.size_guards_hold([torch.randn(2, 2)])
