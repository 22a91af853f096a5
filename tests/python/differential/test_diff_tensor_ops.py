"""Differential tests: broadcasting, reductions, joining/splitting, indexing, activations."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F


def test_broadcasting(check):
    def f(a, b, c, s):
        return a + b, a * c, (b - c).pow(2), torch.maximum(a, c), a * s, torch.where(a > 0, b, c)

    check.captured(f, (torch.randn(3, 1, 5), torch.randn(4, 5), torch.randn(5), torch.randn(())))


def test_broadcast_with_python_scalars(check):
    def f(x):
        return 2 * x + 1, x / 3, 1 - x, x ** 2, 2 ** x, x.clamp(min=-0.5), x.clamp(-0.5, 0.5)

    check.captured(f, (torch.randn(4, 4),))


@pytest.mark.parametrize("op", ["sum", "mean", "amax", "amin", "prod", "var", "std", "norm",
                                "logsumexp", "argmax", "argmin", "max_dim", "min_dim", "all_any",
                                "cumsum", "cumprod", "median"])
def test_reductions(check, op):
    def f(x):
        if op == "sum":
            return x.sum(), x.sum(0), x.sum((0, 2), keepdim=True), x.sum(-1, dtype=torch.float64)
        if op == "mean":
            return x.mean(), x.mean(1), x.mean((1, 2), keepdim=True)
        if op == "amax":
            return x.amax(), x.amax(1), x.amax((0, 1), keepdim=True)
        if op == "amin":
            return x.amin(-1), x.amin((0, 2))
        if op == "prod":
            return x.prod(1), x.prod()
        if op == "var":
            return x.var(1), x.var(1, unbiased=False), x.var((0, 2), keepdim=True, correction=0)
        if op == "std":
            return x.std(), x.std(-1, keepdim=True)
        if op == "norm":
            return x.norm(), x.norm(dim=-1), torch.linalg.vector_norm(x, 1, dim=0)
        if op == "logsumexp":
            return x.logsumexp(-1), torch.logsumexp(x, (0, 1))
        if op == "argmax":
            return x.argmax(), x.argmax(1), x.argmax(-1, keepdim=True)
        if op == "argmin":
            return x.argmin(0)
        if op == "max_dim":
            v, i = x.max(1)
            return v, i, x.max()
        if op == "min_dim":
            return x.min(-1, keepdim=True)
        if op == "all_any":
            return (x > 0).all(), (x > 0).any(1), (x > -10).all(-1)
        if op == "cumsum":
            return x.cumsum(1), x.cumsum(0, dtype=torch.float64)
        if op == "cumprod":
            return x.cumprod(-1)
        return x.median(1)

    check.captured(f, (torch.randn(3, 4, 5),))


def test_max_dim_return_type(check):
    # torch.return_types.max is a structseq; the compiled output must be the same type.
    check.captured(lambda x: x.max(dim=0), (torch.randn(4, 3),))


def test_cat_stack(check):
    def f(a, b, c):
        return (torch.cat([a, b], 0), torch.cat((a, b, a), dim=1), torch.stack([a, b]),
                torch.stack([a, b], dim=-1), torch.hstack([a, b]), torch.cat([c, c.double()]))

    check.captured(f, (torch.randn(2, 3), torch.randn(2, 3), torch.randn(4)))


def test_split_chunk_unbind(check):
    def f(x):
        a = x.split(2, dim=1)               # uneven: sizes 2, 2, 1
        b = x.split([1, 3, 1], dim=1)
        c = x.chunk(3, dim=0)
        d = x.unbind(0)
        e = torch.tensor_split(x, 2, dim=1)
        return [t * 2 for t in a], b, [t + 1 for t in c], d[1].sum(), e

    check.captured(f, (torch.randn(3, 5),))


def test_split_outputs_are_views(check):
    # Outputs that are views of the input (split without compute) must stay views.
    check(lambda x: x.split(2, dim=0), (torch.randn(5, 2),), expect_fallbacks=0)


def test_shape_manipulations(check):
    def f(x):
        return (x.flip(0), x.roll(1, 1), x.repeat(2, 1), x.tile((1, 2)), x.narrow(1, 1, 2),
                F.pad(x, (1, 2)), F.pad(x, (1, 1, 2, 0), value=-1.0), x.tril(), x.triu(1),
                x.movedim(0, 1).contiguous())

    check.captured(f, (torch.randn(3, 4),))


def test_sort_topk(check):
    def f(x):
        v, i = x.topk(3, dim=-1)
        s, si = x.sort(dim=0, descending=True, stable=True)
        return v, i, s, si

    torch.manual_seed(0)
    check.captured(f, (torch.randperm(20).view(4, 5).float(),))


def test_index_select_gather_scatter(check):
    def f(x, idx, gidx, src):
        return (x.index_select(0, idx), x.index_select(1, idx[:2]), x.gather(1, gidx),
                torch.zeros(3, 4).scatter(1, gidx, src), torch.zeros(3, 4).scatter_add(1, gidx, src),
                torch.take_along_dim(x, gidx, 1))

    x = torch.randn(3, 4)
    check.captured(f, (x, torch.tensor([2, 0, 1]), torch.tensor([[0, 1], [3, 3], [2, 0]]),
                       torch.randn(3, 2)))


def test_advanced_indexing(check):
    def f(x, i, j):
        return x[i], x[:, i], x[i, j], x[i[:, None], j], x[..., 1], x[None, 1:, None, ::2]

    check.captured(f, (torch.randn(4, 5), torch.tensor([3, 0, 1]), torch.tensor([4, 2, 0])))


def test_index_put(check):
    def f(x, i, v):
        y = x.clone()
        y[i] = v
        y.index_put_((i, i), torch.tensor(-1.0), accumulate=True)
        return y

    check.captured(f, (torch.randn(4, 4), torch.tensor([1, 3]), torch.randn(2, 4)))


def test_embedding(check):
    torch.manual_seed(0)
    emb = nn.Embedding(20, 8, padding_idx=0).eval()

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = emb
            self.pos = nn.Embedding(10, 8)

        def forward(self, ids):
            pos = torch.arange(ids.shape[1])
            return self.emb(ids) + self.pos(pos), F.embedding(ids, self.emb.weight)

    check.captured(M().eval(), (torch.randint(0, 20, (2, 7)),))


def test_losses(check):
    def f(logits, target):
        return (F.cross_entropy(logits, target), F.nll_loss(logits.log_softmax(-1), target),
                F.cross_entropy(logits, target, label_smoothing=0.1, reduction="none"),
                F.mse_loss(logits, logits.flip(0)), F.binary_cross_entropy_with_logits(logits, logits.sigmoid()))

    check.captured(f, (torch.randn(4, 5), torch.tensor([0, 4, 2, 1])))


def test_one_hot(check):
    # num_classes is given: the output shape does not depend on the data. one_hot is recorded
    # whole (its composite validates the classes with .item()), so it runs as an ATen call that
    # validates as eager does.
    check.captured(lambda t: F.one_hot(t, 5).float() * 2, (torch.tensor([0, 4, 2, 1]),))


def test_one_hot_validates_and_needs_num_classes():
    f = torch.compile(lambda t: F.one_hot(t, 5).float() * 2, backend="ember")
    f(torch.tensor([0, 4, 2, 1]))
    with pytest.raises(RuntimeError, match="smaller than num_classes"):
        f(torch.tensor([0, 7, 2, 1]))
    # Without num_classes the shape depends on the data: the graph falls back, results as eager.
    g = torch.compile(lambda t: F.one_hot(t) * 2, backend="ember")
    t = torch.tensor([0, 3, 1])
    torch.testing.assert_close(g(t), F.one_hot(t) * 2)


_ACTIVATIONS = {
    "relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu, "sigmoid": torch.sigmoid, "tanh": torch.tanh, "elu": F.elu,
    "leaky_relu": lambda x: F.leaky_relu(x, 0.1), "softplus": F.softplus, "hardswish": F.hardswish,
    "hardsigmoid": F.hardsigmoid, "hardtanh": F.hardtanh, "mish": F.mish, "relu6": F.relu6,
    "selu": F.selu, "celu": F.celu, "logsigmoid": F.logsigmoid, "softsign": F.softsign,
    "erf": torch.erf, "exp": torch.exp, "log1p_abs": lambda x: torch.log1p(x.abs()),
    "rsqrt_abs": lambda x: (x.abs() + 0.1).rsqrt(), "sin_cos": lambda x: x.sin() * x.cos(),
    "reciprocal": lambda x: 1 / (x.abs() + 1), "sign_abs": lambda x: x.sign() * x.abs(),
    "round_floor_ceil": lambda x: x.round() + x.floor() - x.ceil() + x.trunc(),
    "glu": lambda x: F.glu(x, -1), "prelu": lambda x: F.prelu(x, torch.tensor([0.2])),
    "nan_to_num": lambda x: torch.nan_to_num(x.log()), "atan2": lambda x: torch.atan2(x, x.flip(0)),
}


@pytest.mark.parametrize("name", list(_ACTIVATIONS))
def test_activations(check, name):
    act = _ACTIVATIONS[name]
    x = torch.randn(6, 8) * 3
    x[0, 0] = 0.0
    check.captured(lambda x: act(x), (x,))


def test_multiple_output_containers(check):
    def f(x, y, scale=2.0):
        return {"sum": x + y, "nested": [x * scale, (y - 1, None)], "n": 3, "shape": x.shape}

    check.captured(f, (torch.randn(2, 3), torch.randn(2, 3)), {"scale": 0.5})


def test_graph_break_two_graphs(check):
    def f(x):
        y = x.sin() * 2
        torch._dynamo.graph_break()
        return y.cos() + x

    check.captured(f, (torch.randn(4),), graphs=2)
