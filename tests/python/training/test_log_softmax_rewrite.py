"""Note [Log-softmax as x - logsumexp(x)] (rewrite/log_softmax_rewrite.h): a language model's
log-softmax over a long vocabulary is x - logsumexp(x); the backward recomputes it from the logits
and one value per row instead of keeping it (GPT-2's head: 785 MB saved in f32, 393 MB of bf16
logits now). On the CPU with EMBER_SPLIT_REDUCTIONS=all; traced for cuda:0 with no GPU."""

import pytest
import torch

import ember._C as C
import ember.tracing as T
from ember.testing import check_model

F = torch.nn.functional
V = 5000


class Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(32, V)

    def forward(self, x, t):
        return F.cross_entropy(self.proj(x).view(-1, V), t.view(-1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_matches_eager(dtype, monkeypatch):
    monkeypatch.setenv("EMBER_SPLIT_REDUCTIONS", "all")
    tol = {} if dtype == torch.float32 else dict(atol=2e-2, rtol=2e-2)
    check_model(Head().to(dtype), (torch.randn(2, 8, 32, dtype=dtype),
                                   torch.randint(0, V, (2, 8))), grad=True, **tol)


def test_the_backward_keeps_the_logits_not_the_log_softmax():
    args = [torch.randn(4, 64, 32), torch.randn(V, 32), torch.randn(V),
            torch.randint(0, V, (4, 64))]
    torch.set_autocast_enabled("cuda", True)  # torch.autocast("cuda") is off without CUDA
    torch.set_autocast_dtype("cuda", torch.bfloat16)
    try:
        joint, _, sig = T.trace_joint(
            lambda x, w, b, t: F.cross_entropy(F.linear(x, w, b).view(-1, V), t.view(-1)),
            args, [True, True, True, False], device="cuda:0")
    finally:
        torch.set_autocast_enabled("cuda", False)
    assert "aten::logsumexp" in joint.ops and "aten::_log_softmax" not in joint.ops
    _, _, saved = C.split_training_graph(joint, **sig)
    # The bf16 logits (2 bytes each) and the row values, not an f32 log-softmax (4 bytes each).
    assert saved < 4 * 64 * V * 4, saved


class Loss(torch.nn.Module):
    def __init__(self, reduction):
        super().__init__()
        self.proj = torch.nn.Linear(32, V)
        self.reduction = reduction

    def forward(self, x, t):
        return F.cross_entropy(self.proj(x), t, reduction=self.reduction, ignore_index=7)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_the_loss_as_a_gather_matches_eager(reduction, dtype, monkeypatch):
    """nll_loss_forward recorded as a gather and two sums: ignored targets (7) count neither in
    the sum nor in the mean's divisor."""
    monkeypatch.setenv("EMBER_SPLIT_REDUCTIONS", "all")
    tol = {} if dtype == torch.float32 else dict(atol=2e-2, rtol=2e-2)
    t = torch.randint(0, V, (16,))
    t[::3] = 7
    check_model(Loss(reduction).to(dtype), (torch.randn(16, 32, dtype=dtype), t), grad=True, **tol)


def test_every_target_ignored_gives_nan_as_eager(monkeypatch):
    monkeypatch.setenv("EMBER_SPLIT_REDUCTIONS", "all")
    m = Loss("mean")
    x, t = torch.randn(4, 32), torch.full((4,), 7)
    got = torch.compile(m, backend="ember")(x, t)
    assert torch.isnan(m(x, t)) and torch.isnan(got)


def test_the_forward_reads_one_element_per_row():
    """No nll_loss_forward call, which would need the whole log-softmax in memory."""
    args = [torch.randn(64, 32), torch.randn(V, 32), torch.randint(0, V, (64,))]
    joint, _, _ = T.trace_joint(lambda x, w, t: F.cross_entropy(F.linear(x, w), t), args,
                                [True, True, False], device="cuda:0")
    assert "aten::gather" in joint.ops and "aten::nll_loss_forward" not in joint.ops
    assert "aten::nll_loss_backward" not in joint.ops  # decomposed (decompose_backward.cpp)
