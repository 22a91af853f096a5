"""Training through ember.compile (the capture path): a frame whose inputs require grad under
grad mode is captured as a joint forward-and-backward graph (src/capture/compile/capture_compiler.cpp,
finish_training), split and compiled; its outputs' grad_fn runs the compiled backward. Gradients
against eager's, over several steps."""

import copy

import torch
import torch.nn as nn

import ember
import ember.metrics


def _loss(out):
    g = torch.Generator().manual_seed(1234)
    return (out * torch.rand(out.shape, generator=g)).sum()


def _train_both(model, inputs, steps=2, atol=1e-5, rtol=1e-4):
    """Runs `steps` forward/backward steps eagerly and through ember.compile on copies of
    `model`; asserts outputs, parameter gradients and buffers match after each step."""
    eager, compiled_model = model, copy.deepcopy(model)
    compiled = ember.compile(compiled_model)
    ember.metrics.reset()
    for _ in range(steps):
        e_out, c_out = eager(*inputs), compiled(*inputs)
        assert c_out.requires_grad and c_out.grad_fn is not None
        torch.testing.assert_close(c_out, e_out, atol=atol, rtol=rtol)
        _loss(e_out).backward()
        _loss(c_out).backward()
        for (name, p), q in zip(eager.named_parameters(), compiled_model.parameters()):
            torch.testing.assert_close(q.grad, p.grad, atol=atol, rtol=rtol, msg=lambda m: f"{name}: {m}")
        for (name, b), c in zip(eager.named_buffers(), compiled_model.buffers()):
            torch.testing.assert_close(c, b, atol=atol, rtol=rtol, msg=lambda m: f"{name}: {m}")
        eager.zero_grad(set_to_none=True)
        compiled_model.zero_grad(set_to_none=True)
    return ember.metrics.snapshot()


def test_mlp_trains_through_one_joint_graph():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 4))
    snap = _train_both(model, (torch.randn(8, 16),), steps=3)
    assert snap["captured_frames"] == 1 and snap["eager_frames"] == 0, ember.metrics.fallback_reasons
    assert snap["training_graphs"] == 1 and snap["kernels"] > 0, snap


def test_convnet_with_batch_norm_updates_running_statistics():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(),
                          nn.Linear(8 * 6 * 6, 5)).train()
    snap = _train_both(model, (torch.randn(4, 3, 8, 8),), atol=1e-4)
    assert snap["training_graphs"] == 1 and snap["eager_frames"] == 0, ember.metrics.fallback_reasons


def test_input_gradient_and_a_non_differentiable_output():
    def f(x, w):
        y = torch.tanh(x @ w)
        return y, y.argmax(-1)

    x = torch.randn(5, 4, requires_grad=True)
    w = torch.randn(4, 3, requires_grad=True)
    xc, wc = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    c = ember.compile(f)
    ember.metrics.reset()
    (ye, ie), (yc, ic) = f(x, w), c(xc, wc)
    assert torch.equal(ie, ic) and not ic.requires_grad
    _loss(ye).backward()
    _loss(yc).backward()
    torch.testing.assert_close(xc.grad, x.grad)
    torch.testing.assert_close(wc.grad, w.grad)
    assert ember.metrics.snapshot()["training_graphs"] == 1


class _Breaks(nn.Module):
    """A graph break between two layers (a data-dependent branch)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(6, 6), nn.Linear(6, 3)

    def forward(self, x):
        h = torch.relu(self.a(x))
        if h.sum() > 0:  # reads data: a graph break
            h = h * 2
        return self.b(h)


def test_gradients_flow_through_a_graph_break():
    torch.manual_seed(0)
    snap = _train_both(_Breaks(), (torch.randn(4, 6),))
    assert snap["graph_breaks"] >= 1 and snap["training_graphs"] >= 2, snap


def test_no_grad_call_runs_an_inference_graph_then_training_again():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
    c = ember.compile(model)
    x = torch.randn(3, 4)
    with torch.no_grad():
        out = c(x)
    assert out.grad_fn is None and not out.requires_grad
    out = c(x)
    assert out.grad_fn is not None
    out.sum().backward()
    assert model[0].weight.grad is not None


def test_no_grad_block_inside_the_frame_detaches_its_part():
    torch.manual_seed(0)

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

        def forward(self, x):
            with torch.no_grad():
                scale = self.a(x).abs().mean()
            return self.b(x) * scale

    snap = _train_both(M(), (torch.randn(3, 4),))
    assert snap["eager_frames"] == 0, ember.metrics.fallback_reasons


def test_retain_graph_and_a_second_backward():
    lin = nn.Linear(3, 2)
    c = ember.compile(lin)
    out = c(torch.randn(4, 3)).sum()
    out.backward(retain_graph=True)
    first = lin.weight.grad.clone()
    out.backward()
    torch.testing.assert_close(lin.weight.grad, 2 * first)


def test_backward_inside_the_frame_is_a_graph_break():
    # Tensor.backward on tracer tensors would consume the joint graph's autograd graph and fill
    # the tracer leaves' .grad: it breaks the graph and runs in Python.
    def step(m, x):
        loss = m(x).square().sum()
        loss.backward()
        return loss

    torch.manual_seed(0)
    lin = nn.Linear(3, 2)
    twin = copy.deepcopy(lin)
    x = torch.randn(4, 3)
    c = ember.compile(step)
    ember.metrics.reset()
    torch.testing.assert_close(c(twin, x), step(lin, x))
    torch.testing.assert_close(twin.weight.grad, lin.weight.grad)
    assert ember.metrics.snapshot()["graph_breaks"] == 1
    assert any("Tensor.backward" in r for r in ember.metrics.fallback_reasons)


def test_whole_training_step_with_an_optimizer_matches_eager():
    # zero_grad, forward, backward and SGD.step in one compiled function: the optimizer's methods
    # never run at capture time (run there, SGD.step updated the parameters during the capture
    # and again in Python: twice per call).
    def step(m, opt, x):
        opt.zero_grad()
        loss = m(x).square().sum()
        loss.backward()
        opt.step()
        return loss

    torch.manual_seed(0)
    lin = nn.Linear(3, 2)
    twin = copy.deepcopy(lin)
    o1 = torch.optim.SGD(lin.parameters(), lr=0.1, momentum=0.9)
    o2 = torch.optim.SGD(twin.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(4, 3)
    c = ember.compile(step)
    for _ in range(3):
        torch.testing.assert_close(c(twin, o2, x), step(lin, o1, x))
        torch.testing.assert_close(twin.weight, lin.weight)
        torch.testing.assert_close(twin.bias, lin.bias)


def test_optimizer_step_alone_is_not_run_at_capture_time():
    torch.manual_seed(0)
    lin = nn.Linear(3, 2)
    opt = torch.optim.Adam(lin.parameters(), lr=0.1)
    lin(torch.randn(4, 3)).sum().backward()
    twin, twin_opt = copy.deepcopy(lin), None
    twin_opt = torch.optim.Adam(twin.parameters(), lr=0.1)
    twin.weight.grad, twin.bias.grad = lin.weight.grad.clone(), lin.bias.grad.clone()
    ember.compile(lambda: twin_opt.step())()
    opt.step()
    torch.testing.assert_close(twin.weight, lin.weight)


def test_clip_grad_norm_runs_in_python():
    # clip_grad_norm_ reads the parameters' .grad, which their tracer tensors do not have: run
    # for real at capture time it saw no gradients and clipped nothing (silently). It breaks the
    # graph and runs in Python.
    torch.manual_seed(0)
    lin = nn.Linear(3, 2)
    twin = copy.deepcopy(lin)
    x = torch.randn(4, 3)

    def clip(ps):
        return torch.nn.utils.clip_grad_norm_(ps, 0.1)

    c = ember.compile(clip)
    for _ in range(2):
        (lin(x) * 10).sum().backward()
        (twin(x) * 10).sum().backward()
        torch.testing.assert_close(c(list(twin.parameters())), clip(list(lin.parameters())))
        torch.testing.assert_close(twin.weight.grad, lin.weight.grad)


def test_reading_grad_of_a_parameter_reads_the_real_gradient():
    # A tracer tensor has no .grad: a graph input's gradient is its real tensor's, read through
    # the input's source (before, every p.grad read as None and this norm came out 0).
    lin = nn.Linear(3, 2)
    ps = list(lin.parameters())

    def grad_norm(ps):
        total = torch.zeros(())
        for p in ps:
            if p.grad is not None:
                total = total + (p.grad ** 2).sum()
        return total

    c = ember.compile(grad_norm)
    with torch.no_grad():
        torch.testing.assert_close(c(ps), grad_norm(ps))  # no gradients yet: 0
    for _ in range(2):
        lin(torch.randn(4, 3)).sum().backward()
        with torch.no_grad():
            torch.testing.assert_close(c(ps), grad_norm(ps))
    lin.zero_grad(set_to_none=True)
    lin(torch.randn(4, 3)).square().sum().backward()
    with torch.no_grad():
        torch.testing.assert_close(c(ps), grad_norm(ps))
