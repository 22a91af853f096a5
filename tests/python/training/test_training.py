"""Training through torch.compile(backend="ember"): the joint forward and backward graph is traced
on ember's tracer tensors, split (graph/partition.h), and both halves compiled; the outputs'
grad_fn is a C++ node that runs the compiled backward (runtime/compiled_function.h). Gradients
are compared with eager's."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import ember
from ember.testing import check_model


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(12, 32), nn.Linear(32, 5)
        self.norm = nn.LayerNorm(32)

    def forward(self, x):
        return self.fc2(F.gelu(self.norm(self.fc1(x))))


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, stride=2)
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.conv1(x)), 2)
        h = F.silu(self.conv2(h))
        return self.head(h.mean((2, 3)))


def test_module_gradients_match_eager():
    torch.manual_seed(0)
    for model, x in ((MLP(), torch.randn(6, 12)), (ConvNet(), torch.randn(2, 3, 16, 16))):
        m = check_model(model, (x,), grad=True, expect_graphs=1, expect_fallbacks=0,
                        atol=1e-5, rtol=1e-4)
        assert m["graphs"] == 1
    assert ember.metrics.snapshot()["training_graphs"] == 1


def test_input_gradients_and_several_outputs():
    def f(x, w):
        h = torch.softmax(x @ w, dim=-1)
        return h * 2.0, (h.sum(-1) - x.pow(2).mean(-1)).tanh()

    x = torch.randn(5, 7, requires_grad=True)
    w = torch.randn(7, 3, requires_grad=True)
    check_model(f, (x, w), grad=True, expect_graphs=1, expect_fallbacks=0, atol=1e-5, rtol=1e-4)


def test_autograd_grad_retain_graph_and_unused_inputs():
    def f(x, w, unused):
        return (x * w).sin().sum(0)

    x, w = torch.randn(4, 3, requires_grad=True), torch.randn(3, requires_grad=True)
    unused = torch.randn(2, requires_grad=True)
    torch._dynamo.reset()
    ember.metrics.reset()
    cf = torch.compile(f, backend="ember")
    y = cf(x, w, unused)
    assert y.grad_fn.name() == "EmberCompiledBackward"
    want = torch.autograd.grad(f(x, w, unused).sum(), (x, w))
    got = torch.autograd.grad(y.sum(), (x, w), retain_graph=True)
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e)
    again = torch.autograd.grad(y.sum(), (x, w))  # retained: a second backward works
    for g, e in zip(again, want):
        torch.testing.assert_close(g, e)
    with pytest.raises(RuntimeError, match="retain_graph"):
        y.sum().backward()  # freed now, as eager says
    z = cf(x, w, unused)
    z.sum().backward()
    assert unused.grad is None  # no output reaches it: no gradient, as in eager
    assert ember.metrics.snapshot()["fallbacks"] == 0


def test_double_backward_is_refused_with_a_clear_error():
    cf = torch.compile(lambda x: (x.exp() * x).sum(), backend="ember")
    x = torch.randn(3, requires_grad=True)
    with pytest.raises(Exception, match="double backward"):
        torch.autograd.grad(cf(x), (x,), create_graph=True)


def test_saved_input_changed_in_place_is_caught():
    cf = torch.compile(lambda x, w: (x * w).sum(), backend="ember")
    x, w = torch.randn(3, requires_grad=True), torch.randn(3)
    y = cf(x, w)
    w.add_(1.0)  # w is saved for x's gradient
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_no_grad_uses_the_inference_graph():
    model = MLP()
    torch._dynamo.reset()
    ember.metrics.reset()
    cm = torch.compile(model, backend="ember")
    x = torch.randn(6, 12)
    cm(x).sum().backward()
    with torch.no_grad():
        out = cm(x)
    assert out.grad_fn is None
    torch.testing.assert_close(out, model(x).detach())
    m = ember.metrics.snapshot()
    assert m["training_graphs"] == 1 and m["graphs"] == 2


def test_batch_norm_training_falls_back_with_a_reason():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU())
    m = check_model(model, (torch.randn(2, 3, 8, 8),), grad=True, atol=1e-5, rtol=1e-4)
    assert m["fallbacks"] == 1
    assert any("running statistics" in r for r in m["fallback_reasons"])
