"""Kernels of parameters only (autocast's casts of the weights to bf16) keep their outputs from
call to call while every parameter is the same tensor at the same version
(runtime/executor.h, Kernel::parameter_cache): an in-place update of a weight (an optimizer's
step) or another weight tensor makes the kernel run again. Differential against eager."""

from __future__ import annotations

import pytest
import torch

import ember._C as C
from ember.tracing import trace_with_structure


def linear_bf16(x, w, b):
    return x @ w.to(torch.bfloat16).t() + b.to(torch.bfloat16)


@pytest.mark.parametrize("triton", [False, True])
def test_weight_casts_are_kept_while_the_weights_do_not_change(triton):
    if triton:
        pytest.importorskip("triton")
    x = torch.randn(8, 16, dtype=torch.bfloat16)
    w, b = torch.randn(32, 16), torch.randn(32)
    graph, _ = trace_with_structure(linear_bf16, (x, w, b), kinds=["user", "param", "param"])
    compiled = C.CompiledGraph(graph, triton_interpret=triton)  # C++ kernels, or Triton's
    assert compiled.num_parameter_kernels >= 1, compiled.describe_steps()
    # Triton's interpreter may round a bf16 sum one ulp away from eager (values up to ~16).
    tol = dict(atol=0.13, rtol=1.6e-2) if triton else {}
    for _ in range(2):
        torch.testing.assert_close(compiled(x, w, b)[0], linear_bf16(x, w, b), **tol)
    with torch.no_grad():
        w.mul_(2)  # in place: the version counter moves, the cast runs again
    torch.testing.assert_close(compiled(x, w, b)[0], linear_bf16(x, w, b), **tol)
    w2 = torch.randn(32, 16)  # another tensor
    torch.testing.assert_close(compiled(x, w2, b)[0], linear_bf16(x, w2, b), **tol)
    torch.testing.assert_close(compiled(x, w, b)[0], linear_bf16(x, w, b), **tol)
    p = torch.nn.Parameter(w.clone())
    torch.testing.assert_close(compiled(x, p, b)[0], linear_bf16(x, p, b), **tol)
    p.data = torch.randn(32, 16)  # same TensorImpl and version, another storage
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, p, b)[0], linear_bf16(x, p, b), **tol)


def test_user_inputs_and_graph_outputs_are_never_kept():
    x = torch.randn(8, 16, dtype=torch.bfloat16)
    w, b = torch.randn(32, 16), torch.randn(32)
    graph, _ = trace_with_structure(linear_bf16, (x, w, b))  # every input a user input
    assert C.CompiledGraph(graph).num_parameter_kernels == 0

    def cast_out(w):
        return w.to(torch.bfloat16) * 2  # a parameter's kernel whose result the caller gets

    graph, _ = trace_with_structure(cast_out, (w,), kinds=["param"])
    compiled = C.CompiledGraph(graph)
    assert compiled.num_parameter_kernels == 0
    torch.testing.assert_close(compiled(w)[0], cast_out(w))


def test_the_cache_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("EMBER_PARAMETER_CACHE", "0")
    x = torch.randn(8, 16, dtype=torch.bfloat16)
    w, b = torch.randn(32, 16), torch.randn(32)
    graph, _ = trace_with_structure(linear_bf16, (x, w, b), kinds=["user", "param", "param"])
    assert C.CompiledGraph(graph).num_parameter_kernels == 0


class BufferTable(torch.nn.Module):
    """A kernel of a buffer only: the table's softmax, which ember.compile keeps across calls."""

    def __init__(self):
        super().__init__()
        self.register_buffer("table", torch.randn(16, 16))
        self.scale = torch.nn.Parameter(torch.ones(16))

    def forward(self, x):
        return x @ (self.table * self.scale).softmax(-1)


def test_buffers_are_kept_as_parameters_are_and_rerun_when_changed():
    import ember

    model = BufferTable()
    c = ember.compile(model)
    ember.metrics.reset()
    x = torch.randn(4, 16)
    with torch.no_grad():
        for _ in range(2):
            torch.testing.assert_close(c(x), model(x))
        assert ember.metrics.snapshot()["parameter_kernels"] >= 1
        model.table.mul_(2)  # in place: the version moves, the kept softmax is recomputed
        torch.testing.assert_close(c(x), model(x))
        model.table = torch.randn(16, 16)  # another tensor
        torch.testing.assert_close(c(x), model(x))
