"""Training through torch.compile(backend="ember"): the joint forward and backward graph is traced
on ember's tracer tensors, split (graph/partition.h), and both halves compiled; the outputs'
grad_fn is a C++ node that runs the compiled backward (runtime/compiled_function.h). Gradients
are compared with eager's."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import ember
from ember.testing import check_model, recorded_compiled_functions


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


def test_double_backward_falls_back_to_eager():
    # create_graph=True: the compiled backward records no history, so the node runs the program
    # again eagerly and differentiates that; the gradients differentiate again (a gradient
    # penalty, a Hessian-vector product), matching eager's.
    def f(x, w):
        return ((x @ w).tanh() * x.exp()).sum()

    torch.manual_seed(0)
    x, w = torch.randn(4, 3, requires_grad=True), torch.randn(3, 3, requires_grad=True)
    cf = torch.compile(f, backend="ember")
    results = []
    for fn in (f, cf):
        gx, gw = torch.autograd.grad(fn(x, w), (x, w), create_graph=True)
        penalty = gx.square().sum() + gw.sin().sum()
        results.append(torch.autograd.grad(penalty, (x, w)))
    for want, got in zip(*results):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    assert ember.metrics.snapshot()["double_backward_fallbacks"] == 1
    # Plain backward still runs the compiled backward.
    gx, gw = torch.autograd.grad(cf(x, w), (x, w))
    assert gx.grad_fn is None and ember.metrics.snapshot()["double_backward_fallbacks"] == 1


def test_double_backward_is_refused_where_running_again_would_differ():
    # Dropout would draw another mask, BatchNorm would update its statistics twice: a clear
    # error names why, rather than wrong second derivatives.
    cf = torch.compile(lambda x: torch.nn.functional.dropout(x.exp(), 0.5).sum(), backend="ember")
    x = torch.randn(3, requires_grad=True)
    with pytest.raises(Exception, match="double backward.*random"):
        torch.autograd.grad(cf(x), (x,), create_graph=True)
    cg = torch.compile(lambda x: (x.exp() * x).sum(), backend="ember")
    y = torch.randn(3, requires_grad=True) * 2  # not a leaf
    with pytest.raises(Exception, match="double backward.*not a leaf"):
        torch.autograd.grad(cg(y), (y,), create_graph=True)


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


def test_batch_norm_training_updates_running_statistics():
    # The forward graph applies the running statistics' update (an input mutation); gradients,
    # outputs and the module's buffers match eager's, over two steps.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                          nn.Linear(144, 3)).train()
    m = check_model(model, (torch.randn(2, 3, 8, 8),), grad=True, runs=2, expect_graphs=1,
                    expect_fallbacks=0, atol=1e-5, rtol=1e-4)
    assert m["graphs"] == 1


def test_batch_norm_first_layer_input_without_grad():
    # native_batch_norm_backward with output_mask [False, True, True] returns no grad_input on
    # the CPU, where its meta kernel returned one: the results still match by position
    # (runtime/extern_call.cpp).
    torch.manual_seed(0)
    model = nn.Sequential(nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(256, 3)).train()
    check_model(model, (torch.randn(2, 4, 8, 8),), grad=True, runs=2, expect_graphs=1,
                expect_fallbacks=0, atol=1e-5, rtol=1e-4)


def test_min_cut_saves_fewer_bytes_than_the_default_partition(monkeypatch):
    # gelu, * 2 and tanh between two products: the default partition saves what the backward
    # reads (gelu's input and the tanh's output, ...); the min cut saves the first product's
    # result and recomputes the pointwise chain in the backward (graph/partition.h). Without
    # Note [Values the backward writes anyway are saved], which saves the tanh's output too (the
    # second product's weight gradient reads it).
    import ember._C as C
    monkeypatch.setenv("EMBER_SAVE_MATERIALIZED", "0")
    from ember.tracing import trace_joint

    def f(x, w1, w2):
        return (F.gelu(x @ w1) * 2).tanh() @ w2

    torch.manual_seed(0)
    args = (torch.randn(16, 32), torch.randn(32, 64), torch.randn(64, 8))
    graph, _, sig = trace_joint(f, args, [False, True, True])

    def compile_it():
        return C.CompiledFunction(graph, sig["num_primals"], sig["num_forward_outputs"],
                                  sig["tangent_outputs"], sig["grad_inputs"])

    cut = compile_it()
    monkeypatch.setenv("EMBER_MIN_CUT", "0")
    plain = compile_it()
    assert cut.saved_bytes < plain.saved_bytes, (cut.saved_bytes, plain.saved_bytes)
    # saved_values: (producing op, type, bytes) of the saved intermediates (w1 and w2, primal
    # inputs, are saved as they are and not listed); the min cut saves the first product.
    assert [(op, t) for op, t, _ in cut.saved_values] == [("aten::mm", "f32[16, 64] cpu")], \
        cut.saved_values
    assert sum(b for _, _, b in cut.saved_values) <= cut.saved_bytes
    assert any("gelu" in s for s in cut.backward_steps), cut.backward_steps  # recomputed there
    want = None
    for c in (cut, plain):
        x, w1, w2 = (a.clone().requires_grad_(i > 0) for i, a in enumerate(args))
        (y,) = c(x, w1, w2)
        y.square().sum().backward()
        got = (y.detach(), w1.grad, w2.grad)
        if want is None:
            x, w1, w2 = (a.clone().requires_grad_(i > 0) for i, a in enumerate(args))
            e = f(x, w1, w2)
            e.square().sum().backward()
            want = (e.detach(), w1.grad, w2.grad)
        for g_, w_ in zip(got, want):
            torch.testing.assert_close(g_, w_, atol=1e-4, rtol=1e-4)


def test_what_a_backward_product_reads_is_saved_not_recomputed():
    # Note [Values the backward writes anyway are saved] (graph/partition.cpp): the tanh's output
    # is read by the second product's weight gradient; recomputed, the backward would write it.
    import ember._C as C
    from ember.tracing import trace_joint

    def f(x, w1, w2):
        return (F.gelu(x @ w1) * 2).tanh() @ w2

    args = (torch.randn(16, 32), torch.randn(32, 64), torch.randn(64, 8))
    graph, _, sig = trace_joint(f, args, [False, True, True])
    c = C.CompiledFunction(graph, sig["num_primals"], sig["num_forward_outputs"],
                           sig["tangent_outputs"], sig["grad_inputs"])
    assert sorted(op for op, _, _ in c.saved_values) == ["aten::mm", "aten::tanh"], c.saved_values
    assert not any("tanh" in s for s in c.backward_steps), c.backward_steps


def test_outputs_that_alias_inputs_or_repeat():
    # An output that is an input's view, and one tensor returned twice: each gets its own
    # gradient edge (a copy), and the gradients match eager's.
    def f(x, w):
        y = x * w
        return y, y, x.view(-1), (y + 1).sum()

    x, w = torch.randn(3, 4, requires_grad=True), torch.randn(4, requires_grad=True)
    check_model(f, (x, w), grad=True, expect_graphs=1, expect_fallbacks=0, check_aliasing=False)


def test_training_graphs_keep_no_outputs_of_parameter_kernels():
    # Kernels of parameters only keep their outputs across calls in inference graphs (a weight's
    # cast under autocast); a training step changes the parameters, so training graphs do not.
    import ember._C as C
    from ember.tracing import trace_joint

    def f(x, w):
        return x.double() @ w.double().tanh()  # the cast and tanh: a kernel of the weight only

    args = (torch.randn(4, 8), torch.randn(8, 8))
    inference = C.CompiledGraph(ember.tracing.trace_with_structure(
        f, args, ["user", "param"])[0])
    assert inference.num_parameter_kernels == 1
    joint, _, sig = trace_joint(f, args, [False, True], ["user", "param"])
    training = C.CompiledFunction(joint, sig["num_primals"], sig["num_forward_outputs"],
                                  sig["tangent_outputs"], sig["grad_inputs"])
    assert training.num_parameter_kernels == 0


def test_backward_runs_fused_for_an_expanded_gradient_and_recomputes_late(monkeypatch):
    # `y.sum().backward()` outside the compiled function passes ones expanded over y (strides 0):
    # the backward program was traced for a contiguous tangent and ran its unfused form on every
    # call. The node now makes the gradient contiguous. And the min cut's recomputed forward
    # values run just before their first reader (graph/partition.cpp), not all at the start.
    # (The GELU's output is recomputed without Note [Values the backward writes anyway are saved].)
    monkeypatch.setenv("EMBER_SAVE_MATERIALIZED", "0")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 4))
    twin = __import__("copy").deepcopy(model)
    compiled = torch.compile(twin, backend="ember")
    x = torch.randn(16, 8)
    with recorded_compiled_functions() as made:
        for _ in range(2):
            model.zero_grad()
            twin.zero_grad()
            model(x).sum().backward()
            compiled(x).sum().backward()
            for p, q in zip(model.parameters(), twin.parameters()):
                torch.testing.assert_close(q.grad, p.grad, atol=1e-5, rtol=1e-4)
    assert len(made) == 1
    assert made[0].backward_unfused_runs == 0
    steps = made[0].backward_steps
    first_product = next(i for i, s in enumerate(steps) if "aten::mm" in s)
    # The GELU's recomputation is read by the second layer's weight gradient, after the third
    # layer's products: it comes after the first product, not before.
    gelu = next(i for i, s in enumerate(steps) if "aten::gelu" in s)
    assert gelu > first_product, steps
