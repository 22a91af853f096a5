"""Vector norms recorded as the reductions they are (Note [Vector norms as reductions],
src/rewrite/vector_norm.h): every order, dims, keepdim, dtype= and reduced-precision inputs
against eager, forward and backward, and F.normalize as kernels with no ATen call."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import ember
import ember._C as C
from ember.testing import check_model


@pytest.mark.parametrize("ord", [2, 1, math.inf, -math.inf, 3, 0.5])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_vector_norm_orders_against_eager(ord, dtype):
    def f(x):
        return (torch.linalg.vector_norm(x, ord),
                torch.linalg.vector_norm(x, ord, dim=-1),
                torch.linalg.vector_norm(x, ord, dim=(0, 2), keepdim=True),
                torch.linalg.vector_norm(x, ord, dim=1, dtype=torch.float32))

    x = torch.randn(3, 17, 40).to(dtype)
    tol = dict(atol=2e-2, rtol=2e-2) if dtype != torch.float32 else dict(atol=1e-4, rtol=1e-4)
    counters = check_model(f, (x,), expect_graphs=1, **tol)
    assert counters["fallbacks"] == 0


def test_orders_it_leaves_to_aten_stay_as_they_are():
    # ord 0 (a count of non-zeros) and negative orders: recorded as the ATen call.
    x = torch.randn(4, 9)
    for ord in (0, -2):
        g = ember.trace(lambda x: torch.linalg.vector_norm(x, ord, dim=-1), (x,))
        assert g.ops == ["aten::linalg_vector_norm"], (ord, g.ops)
        check_model(lambda x: torch.linalg.vector_norm(x, ord, dim=-1), (x,), expect_graphs=1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_normalize_is_kernels_only(dtype):
    # XCiT's cross-covariance attention: q and k normalized over their tokens.
    def f(q):
        return F.normalize(q, dim=-1) * 2.0

    q = torch.randn(2, 4, 16, 49).to(dtype)
    g = ember.trace(f, (q,))
    assert "aten::linalg_vector_norm" not in g.ops
    assert "aten::sum.dim_IntList" in g.ops and "aten::sqrt" in g.ops
    compiled = C.CompiledGraph(g)
    assert not [s for s in compiled.describe_steps() if s.startswith("extern")], \
        compiled.describe_steps()
    tol = dict(atol=2e-2, rtol=2e-2) if dtype == torch.bfloat16 else {}
    check_model(f, (q,), expect_graphs=1, expect_fallbacks=0, **tol)


def test_vector_norm_gradients():
    # Autograd records linalg_vector_norm (the rewrite runs below it): its own backward.
    def f(x, y):
        return (F.normalize(x, dim=1) * y).sum(-1), x.norm(dim=-1, p=3), x.norm(p=math.inf)

    x = torch.randn(6, 10, requires_grad=True)
    y = torch.randn(6, 10, requires_grad=True)
    check_model(f, (x, y), grad=True, expect_graphs=1, atol=1e-4, rtol=1e-4)
