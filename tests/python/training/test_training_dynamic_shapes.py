"""Training with shape symbols (issue 35): through ember.compile, a frame whose inputs require
grad is captured as one joint graph over the symbols (its tangents in the outputs' symbols), split
by the partitioner (saved values weighed at the hints) and compiled once; the backward program
takes the forward call's symbol values. Every size a test calls gets outputs and gradients equal
to eager's, from one graph."""

import copy
import os
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import ember
from ember import metrics

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "differential"))
from test_diff_dynamic_shapes import BertLayer, GPT2Layer  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


class TokenClassifier(nn.Module):
    """Embedding, dropout (p=0), a projection to the vocabulary and cross entropy over the
    flattened tokens: embedding_dense_backward and nll_loss_backward with symbolic sizes, and a
    target whose symbols only the shape rules relate to the tokens'."""

    def __init__(self, V=50, C=16):
        super().__init__()
        self.emb, self.head, self.drop = nn.Embedding(V, C), nn.Linear(C, V), nn.Dropout(0.0)
        self.V = V

    def forward(self, idx, target):
        h = self.drop(torch.tanh(self.emb(idx)))
        return F.cross_entropy(self.head(h).view(-1, self.V), target.view(-1))


class ConvNet(nn.Module):
    """Convolution, training batch norm (running statistics), max and adaptive pools: their
    backward ops with a symbolic batch and image size."""

    def __init__(self):
        super().__init__()
        self.conv, self.bn, self.fc = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.Linear(8, 4)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        return self.fc(F.adaptive_avg_pool2d(h, 1).flatten(1))


def _train(model, make_inputs, sizes, dynamic=True, rtol=1e-3, atol=1e-4):
    """Steps at each size eagerly and through ember.compile (on a copy); compares outputs,
    parameter gradients and buffers. Returns the metrics."""
    torch.manual_seed(0)
    compiled_model = copy.deepcopy(model)
    compiled = ember.compile(compiled_model, dynamic=dynamic)
    metrics.reset()
    for n in sizes:
        args = make_inputs(n)
        want, got = model(*args), compiled(*args)
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol)
        want.float().square().sum().backward()
        got.float().square().sum().backward()
        for (name, p), q in zip(model.named_parameters(), compiled_model.parameters()):
            torch.testing.assert_close(q.grad, p.grad, rtol=rtol, atol=atol,
                                       msg=lambda m: f"size {n}, {name}: {m}")
        for (name, b), c in zip(model.named_buffers(), compiled_model.buffers()):
            torch.testing.assert_close(c, b, rtol=rtol, atol=atol, msg=lambda m: f"{name}: {m}")
        model.zero_grad(set_to_none=True)
        compiled_model.zero_grad(set_to_none=True)
    return metrics.snapshot()


CASES = {
    "gpt2": (lambda: GPT2Layer(), lambda T: (torch.randn(2, T, 32),), [16, 17, 31, 64, 100]),
    "bert": (lambda: BertLayer(),
             lambda T: (torch.randn(3, T, 32), (torch.arange(T) < T // 2).long().repeat(3, 1)),
             [16, 17, 31, 64]),
    "tokens": (lambda: TokenClassifier(),
               lambda T: (torch.randint(0, 50, (3, T)), torch.randint(0, 50, (3, T))),
               [5, 9, 17, 33]),
    "conv": (lambda: ConvNet().train(), lambda H: (torch.randn(2, 3, H, H),), [8, 10, 16, 21]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_training_with_dynamic_true_compiles_once(case):
    make_model, make_inputs, sizes = CASES[case]
    torch.manual_seed(0)
    snap = _train(make_model(), make_inputs, sizes, dynamic=True)
    assert snap["training_graphs"] == 1 and snap["graphs"] == 1, (snap, metrics.fallback_reasons)
    assert snap["eager_frames"] == 0 and snap["fallbacks"] == 0, metrics.fallback_reasons


@pytest.mark.parametrize("case", ["gpt2", "tokens"])
def test_automatic_dynamic_training_compiles_twice(case):
    # The first call compiles static; the second, at another size, with symbols; the rest reuse it.
    make_model, make_inputs, sizes = CASES[case]
    torch.manual_seed(0)
    with ember.config.patch(dynamic="automatic"):  # (the CI's dynamic rerun sets true)
        snap = _train(make_model(), make_inputs, sizes, dynamic=None)
    assert snap["training_graphs"] == 2 and snap["graphs"] == 2, (snap, metrics.fallback_reasons)


def test_a_batch_that_breaks_a_relation_the_trace_relied_on_recompiles():
    # The loss pairs each token with a target: the trace relied on their counts being equal
    # (a size guard over two input symbols). A call where they differ is an error in eager too;
    # a call with both changed together reuses the graph.
    torch.manual_seed(0)
    model = TokenClassifier()
    compiled = ember.compile(copy.deepcopy(model), dynamic=True)
    metrics.reset()
    for T in (5, 9):
        idx, tgt = torch.randint(0, 50, (3, T)), torch.randint(0, 50, (3, T))
        compiled(idx, tgt).backward()
    assert metrics.snapshot()["training_graphs"] == 1
    with pytest.raises(Exception):
        compiled(torch.randint(0, 50, (3, 5)), torch.randint(0, 50, (3, 6)))


def test_backward_takes_the_forward_calls_symbols():
    # The backward's inputs show the token count only as a product (a flattened [B*T, V]); the
    # forward call's values bind it.
    torch.manual_seed(0)
    model = TokenClassifier()
    compiled = ember.compile(copy.deepcopy(model), dynamic=True)
    for T in (4, 7, 12):
        idx, tgt = torch.randint(0, 50, (2, T)), torch.randint(0, 50, (2, T))
        got = compiled(idx, tgt)
        want = model(idx, tgt)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
        got.backward()


def test_dynamo_symbolic_training_graphs_compile_once():
    # torch.compile(backend="ember", dynamic=True): Dynamo's symbolic graph of a training step is
    # traced as one joint graph over ember's symbols, not compiled once per size.
    torch.manual_seed(0)
    model = GPT2Layer()
    compiled_model = copy.deepcopy(model)
    torch._dynamo.reset()
    compiled = torch.compile(compiled_model, backend="ember", dynamic=True)
    metrics.reset()
    for T in (16, 17, 31, 64):
        x = torch.randn(2, T, 32)
        want, got = model(x), compiled(x)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        want.square().sum().backward()
        got.square().sum().backward()
        for (name, p), q in zip(model.named_parameters(), compiled_model.parameters()):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-3, atol=1e-4,
                                       msg=lambda m: f"T={T}, {name}: {m}")
        model.zero_grad(set_to_none=True)
        compiled_model.zero_grad(set_to_none=True)
    snap = metrics.snapshot()
    assert snap["training_graphs"] == 1 and snap["dynamic_graphs"] == 1, snap
    assert snap["per_size_graphs"] == 0, metrics.fallback_reasons
