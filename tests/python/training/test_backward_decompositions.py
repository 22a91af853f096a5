"""Backward ops recorded as the ops the scheduler fuses (rewrite/decompose_backward.h): each
activation's backward, softmax's, layer norm's and batch norm's run in generated kernels, not as
ATen calls, and their gradients match eager's (f32 and bf16, eager's rounding)."""

import copy

import pytest
import torch
import torch.nn as nn

import ember
from ember.testing import recorded_compiled_functions


@pytest.fixture
def compiled_functions(monkeypatch):
    """The CompiledFunctions the backend makes, to read their backward programs."""
    # The reductions are decomposed on CUDA; here on the CPU too.
    monkeypatch.setenv("EMBER_DECOMPOSE_BACKWARD", "all")
    with recorded_compiled_functions() as made:
        yield made


ACTIVATIONS = {
    "threshold_backward": nn.ReLU(),
    "hardtanh_backward": nn.ReLU6(),
    "leaky_relu_backward": nn.LeakyReLU(0.1),
    "gelu_backward": nn.GELU(),
    "gelu_backward(tanh)": nn.GELU(approximate="tanh"),
    "silu_backward": nn.SiLU(),
    "sigmoid_backward": nn.Sigmoid(),
    "tanh_backward": nn.Tanh(),
    "hardsigmoid_backward": nn.Hardsigmoid(),
    "hardswish_backward": nn.Hardswish(),
    "softplus_backward": nn.Softplus(beta=2.0, threshold=3.0),
    "_softmax_backward_data": nn.Softmax(-1),
    "_log_softmax_backward_data": nn.LogSoftmax(-1),
    "native_layer_norm_backward": nn.LayerNorm(24),
    "native_layer_norm_backward(no affine)": nn.LayerNorm(24, elementwise_affine=False),
}


def grads_of(model, x, loss_weight):
    x = x.detach().requires_grad_(True)
    (model(x).float() * loss_weight).sum().backward()
    return [x.grad] + [p.grad for p in model.parameters()]


def run_both(layer, x, dtype, compiled_functions):
    torch.manual_seed(0)
    model = layer.to(dtype)
    twin = copy.deepcopy(model)
    weight = torch.randn(x.shape, dtype=torch.float32)
    want = grads_of(model, x.to(dtype), weight)
    got = grads_of(torch.compile(twin, backend="ember"), x.to(dtype), weight)
    assert len(compiled_functions) == 1
    return want, got, compiled_functions[0].backward_steps


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_activation_backward_is_generated_and_matches_eager(name, dtype, compiled_functions):
    x = torch.randn(16, 24) * 4
    x[0, :8] = torch.tensor([-3.0, 3.0, 0.0, -6.0, 6.0, 1.5, -1.0, 1.0])  # the kinks
    want, got, steps = run_both(copy.deepcopy(ACTIVATIONS[name]), x, dtype, compiled_functions)
    op = "aten::" + name.split("(")[0]
    assert not any(op in s for s in steps), steps
    tol = dict(atol=1e-5, rtol=1e-4) if dtype == torch.float32 else dict(atol=2e-2, rtol=2e-2)
    for w, g in zip(want, got):
        torch.testing.assert_close(g, w, **tol)


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_batch_norm_backward_is_generated_and_matches_eager(train, channels_last,
                                                           compiled_functions):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.Conv2d(8, 8, 1), nn.BatchNorm2d(8, affine=False))
    model.train(train)
    if not train:
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-1, 1)
                m.running_var.uniform_(0.5, 2)
    twin = copy.deepcopy(model)
    x = torch.randn(4, 3, 10, 10)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    weight = torch.randn(4, 8, 10, 10)
    want = grads_of(model, x, weight)
    got = grads_of(torch.compile(twin, backend="ember"), x, weight)
    steps = compiled_functions[0].backward_steps
    assert not any("native_batch_norm_backward" in s for s in steps), steps
    for w, g in zip(want, got):
        torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4)
    for a, b in zip(model.buffers(), twin.buffers()):
        torch.testing.assert_close(b, a)
    assert ember.metrics.snapshot()["training_graphs"] == 1


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_backward_is_generated_and_matches_eager(reduction, compiled_functions):
    # nll_loss_backward as a comparison with an arange: with log_softmax's backward it is one
    # kernel, no [N, C] tensor of zeros scattered into.
    torch.manual_seed(0)
    model = nn.Linear(16, 40)
    twin = copy.deepcopy(model)
    x, target = torch.randn(24, 16), torch.randint(0, 40, (24,))
    target[:3] = -100  # ignored rows

    def loss(m):
        out = nn.functional.cross_entropy(m(x), target, reduction=reduction)
        return out.sum() if reduction == "none" else out

    loss(model).backward()
    compiled = torch.compile(lambda: loss(twin), backend="ember")
    compiled().backward()
    steps = compiled_functions[0].backward_steps
    assert not any("nll_loss_backward" in s or "log_softmax_backward" in s for s in steps), steps
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(q.grad, p.grad, atol=1e-5, rtol=1e-4)


def test_slice_and_select_backward_are_generated_and_match_eager(compiled_functions):
    # Llama's rotate_half: the halves' gradients are slice_backward calls, summed.
    def rotate_half(x):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        return torch.cat((-x2, x1), dim=-1)

    def f(x, w):
        h = x * w
        return (h * 0.5 + rotate_half(h) * 2.0) * x[:, 1:2].exp() + x[:, 0, None] + h[::2].sum()

    x, w = torch.randn(6, 8), torch.randn(8)
    want = torch.autograd.grad(f(x.requires_grad_(), w.requires_grad_()).sum(), (x, w))
    x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    got = torch.autograd.grad(torch.compile(f, backend="ember")(x2, w2).sum(), (x2, w2))
    steps = compiled_functions[0].backward_steps
    assert not any("slice_backward" in s or "select_backward" in s for s in steps), steps
    for a, b in zip(want, got):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("groups", [1, 8], ids=["dense", "depthwise"])
def test_convolution_bias_gradient_is_generated_and_matches_eager(groups, dtype,
                                                                  compiled_functions):
    # ConvNeXt's depthwise convolutions: the bias's gradient is a sum of the output's gradient in
    # generated kernels; convolution_backward computes the input's and the weight's only.
    torch.manual_seed(0)
    layer = nn.Sequential(nn.Conv2d(8, 8, 7, padding=3, groups=groups), nn.GELU())
    want, got, _ = run_both(layer, torch.randn(4, 8, 12, 12), dtype, compiled_functions)
    backward = compiled_functions[0].graphs[1]
    assert "aten::convolution_backward" in backward and "[True, True, False])" in backward, backward
    tol = dict(atol=1e-4, rtol=1e-4) if dtype == torch.float32 else dict(atol=5e-2, rtol=2e-2)
    for w, g in zip(want, got):
        torch.testing.assert_close(g, w, **tol)
