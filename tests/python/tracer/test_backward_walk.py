"""Note [A backward without autograd's engine] and Note [Tracing for a device this torch lacks]:
trace_joint(device="cuda:0") on a torch without CUDA records the backward by walking autograd's
nodes itself. On the CPU, where both work, the walk records the graph the engine records; and
for cuda:0 it records the CUDA choices in the backward too, which `split_training_graph` and
`triton_plan` then show with no GPU."""

import pytest
import torch

import ember
import ember._C as C
import ember.tracing as T


def mlp(x, w1, b1, w2, b2):
    h = torch.nn.functional.gelu(torch.nn.functional.linear(x, w1, b1))
    return torch.nn.functional.linear(h, w2, b2).softmax(-1).sum(), h


def conv_bn(x, w, g, b, rm, rv):
    y = torch.nn.functional.conv2d(x, w, padding=1)
    y = torch.nn.functional.batch_norm(y, rm, rv, g, b, training=True)
    return torch.relu(y + x).mean()


def attention(q, k, v, w):
    a = torch.nn.functional.scaled_dot_product_attention(q @ w, k, v)
    return (a * a).sum() + q.sum()  # q reaches the loss twice: the gradients are summed


CASES = {
    "mlp": (mlp, lambda: [torch.randn(8, 16), torch.randn(32, 16), torch.randn(32),
                          torch.randn(4, 32), torch.randn(4)], [False, True, True, True, True]),
    "conv_bn": (conv_bn, lambda: [torch.randn(2, 4, 6, 6), torch.randn(4, 4, 3, 3), torch.ones(4),
                                  torch.zeros(4), torch.zeros(4), torch.ones(4)],
                [True, True, True, True, False, False]),
    "attention": (attention, lambda: [torch.randn(2, 3, 5, 8), torch.randn(2, 3, 5, 8),
                                      torch.randn(2, 3, 5, 8), torch.randn(8, 8)],
                  [True, False, True, True]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_walk_records_the_engines_graph_on_cpu(name, monkeypatch):
    fn, make, requires_grad = CASES[name]
    torch.manual_seed(0)
    args = make()
    by_engine, _, sig = T.trace_joint(fn, args, requires_grad, device="cpu")
    monkeypatch.setattr(T, "_device_available", lambda device: False)
    by_walk, _, sig_walk = T.trace_joint(fn, args, requires_grad, device="cpu")
    assert sig_walk == sig
    assert str(by_walk) == str(by_engine)


def test_unreached_inputs_have_no_gradient(monkeypatch):
    monkeypatch.setattr(T, "_device_available", lambda device: False)
    _, _, sig = T.trace_joint(lambda x, y: (x * 2).sum(), [torch.randn(3), torch.randn(3)],
                              [True, True], device="cpu")
    assert sig["grad_inputs"] == [0]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a torch without CUDA")
def test_training_graphs_for_cuda_without_a_gpu():
    fn, make, requires_grad = CASES["mlp"]
    torch.set_autocast_enabled("cuda", True)  # torch.autocast("cuda") turns itself off here
    torch.set_autocast_dtype("cuda", torch.bfloat16)
    try:
        joint, _, sig = T.trace_joint(fn, make(), requires_grad, device="cuda:0")
    finally:
        torch.set_autocast_enabled("cuda", False)
    forward, backward, saved_bytes = C.split_training_graph(joint, **sig)
    assert saved_bytes > 0
    text = str(backward)
    assert "cuda:0" in text and "bf16" in text, text
    # CUDA's choices reach the backward: GELU's backward as pointwise ops (decompose_backward.h,
    # CUDA-only by default), fused with the softmax backward's into Triton kernels.
    assert "gelu_backward" not in text, text
    plans = C.triton_plan(backward)
    assert plans and all(p["why"] == "" for p in plans), plans
    assert any("aten::erf" in p["ops"] for p in plans), plans


def test_a_tracer_tensor_for_cuda_does_not_crash_autograd():
    # Before the stand-in guard, recording an autograd node for a tracer tensor reporting cuda:0
    # on a torch without CUDA aborted the interpreter.
    s = C.TraceSession()
    w = s.add_input(torch.randn(4, 4), "user", "w", "cuda:0")
    with torch.enable_grad():
        w.requires_grad_(True)
        with s:
            y = (w @ w).relu()
    assert y.requires_grad and str(y.device) == "cuda:0"
