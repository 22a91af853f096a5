"""Metadata computations that torch runs while an op is traced (the functionalization of an
in-place op checks it on meta tensors, through Python meta functions for some ops) are not the
program's: nothing they do is recorded (src/tracer/trace_session.cpp, asks_for_meta)."""

import pytest
import torch

import ember
from ember.testing import check_model


@pytest.mark.parametrize("op", ["sigmoid_", "exp_", "tanh_", "relu_", "sqrt_"])
def test_in_place_op_on_an_intermediate_records_only_the_program(op):
    def f(x):
        y = x.abs() + 1
        getattr(y, op)()
        return y

    graph = ember.trace(f, [torch.randn(3, 4)])
    assert all(not o.startswith("prims::") and "empty" not in o for o in graph.ops), graph.ops
    with torch.no_grad():
        check_model(f, (torch.randn(3, 4),), expect_graphs=1, expect_fallbacks=0)
