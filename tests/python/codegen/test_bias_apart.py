"""A linear layer's bias added by the kernel that reads the product (src/runtime/bias_apart.h,
EMBER_BIAS_APART=1; off by default): on Triton graphs (Triton's interpreter on a machine without
a GPU, CUDA graphs on one with) an addmm read only by pointwise ops becomes mm and an add that
fuses into their kernel; one read by anything else keeps its addmm. Differential against eager,
with the steps as the assertion."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import os

import ember
import ember._C as C

triton = pytest.importorskip("triton")
# Triton graphs: the interpreter on the CPU (tests/python/conftest.py sets TRITON_INTERPRET=1 where
# there is no GPU), else a CUDA device.
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
if not INTERPRET and not torch.cuda.is_available():
    pytest.skip("no GPU and Triton's interpreter is off", allow_module_level=True)


def compiled(monkeypatch, fn, args, on=True, triton_graph=True):
    """`fn` compiled with EMBER_BIAS_APART on or off (None: unset), as a Triton graph or a C++
    one, and checked against eager."""
    if on is None:
        monkeypatch.delenv("EMBER_BIAS_APART", raising=False)
    else:
        monkeypatch.setenv("EMBER_BIAS_APART", "1" if on else "0")
    on_gpu = triton_graph and not INTERPRET
    args = tuple(a.cuda() for a in args) if on_gpu else args
    graph = ember.trace(fn, args)
    c = C.CompiledGraph(graph, triton_interpret=triton_graph and INTERPRET)
    assert c.codegen_error == "" and list(c.refused_kernels) == []
    got = c(*args)
    want = fn(*args)
    want = want if isinstance(want, tuple) else (want,)
    tol = 1e-4 if on_gpu else 1e-5
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, atol=tol, rtol=tol)
    return c


def steps_with(c, op):
    return [s for s in c.describe_steps() if op in s]


def ffn(x, w1, b1, w2, b2, g, b):
    # A transformer's feed-forward block over [batch, tokens, hidden]: both products are read
    # only by pointwise ops (the GELU; the residual add before the norm).
    h = F.gelu(F.linear(x, w1, b1))
    return F.layer_norm(x + F.linear(h, w2, b2), (x.shape[-1],), g, b)


def ffn_args():
    torch.manual_seed(0)
    return (torch.randn(2, 5, 16), torch.randn(32, 16) / 4, torch.randn(32), torch.randn(16, 32) / 6,
            torch.randn(16), torch.randn(16), torch.randn(16))


def test_biases_read_by_pointwise_ops_are_added_in_their_kernels(monkeypatch):
    c = compiled(monkeypatch, ffn, ffn_args())
    assert c.num_bias_apart == 2
    assert steps_with(c, "aten::addmm") == [], c.describe_steps()
    assert len([s for s in c.describe_steps() if s.startswith("extern aten::mm")]) == 2
    gelu = [s for s in c.describe_steps() if s.startswith("kernel") and "aten::gelu" in s]
    assert len(gelu) == 1 and "aten::add.Tensor" in gelu[0], c.describe_steps()


def test_products_read_otherwise_keep_their_addmm(monkeypatch):
    torch.manual_seed(0)
    x, w, b = torch.randn(8, 16), torch.randn(12, 16), torch.randn(12)
    def also_a_view_out(x, w, b):
        y = F.linear(x, w, b)
        return y.relu(), y.view(4, 24)

    # The graph's output itself; a reduction (softmax); a view of the product as an output.
    for fn in (lambda x, w, b: F.linear(x, w, b),
               lambda x, w, b: F.linear(x, w, b).softmax(-1), also_a_view_out):
        c = compiled(monkeypatch, fn, (x, w, b))
        assert c.num_bias_apart == 0 and steps_with(c, "aten::addmm"), c.describe_steps()


def test_off_by_default_and_on_cpp_graphs_the_addmm_stays(monkeypatch):
    for on, triton_graph in ((None, True), (False, True), (True, False)):
        c = compiled(monkeypatch, ffn, ffn_args(), on=on, triton_graph=triton_graph)
        assert c.num_bias_apart == 0 and len(steps_with(c, "aten::addmm")) == 2, c.describe_steps()
