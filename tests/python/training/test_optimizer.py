"""torch.optim steps under torch.compile(backend="ember"): Dynamo installs the parameters and the
optimizer's state as attributes of its graph; ember lifts them to inputs (backend.py), so their
in-place updates are the graph's input mutations. Parameters and state match eager's after
several steps."""

import copy

import pytest
import torch

import ember
from optimizer_steps import SHAPES, optimizer_steps_match_eager


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW"])
def test_optimizer_steps_match_eager(name):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    twin = copy.deepcopy(model)
    make = {"SGD": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=1e-2),
            "Adam": lambda p: torch.optim.Adam(p, lr=1e-2),
            "AdamW": lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1)}[name]
    opt, eager_opt = make(model.parameters()), make(twin.parameters())
    torch._dynamo.reset()
    ember.metrics.reset()
    step = torch.compile(opt.step, backend="ember")
    for i in range(3):
        x = torch.randn(4, 8)
        for m in (model, twin):
            m.zero_grad()
            m(x).square().sum().backward()
        step()
        eager_opt.step()
        for p, q in zip(model.parameters(), twin.parameters()):
            torch.testing.assert_close(p, q, atol=1e-6, rtol=1e-5)
    for p, q in zip(model.parameters(), twin.parameters()):
        for k, v in eager_opt.state[q].items():
            torch.testing.assert_close(opt.state[p][k], v, atol=1e-6, rtol=1e-5)
    m = ember.metrics.snapshot()
    assert m["fallbacks"] == 0 and m["graphs"] >= 1, (m, ember.metrics.fallback_reasons)


def test_adam_step_is_two_kernels():
    # Note [Held kernels] (sched/fusion.cpp): per parameter, the moments' update and the
    # parameter's update are one kernel over the parameter's shape, the step count and bias
    # corrections one of scalars; aten::pow.Scalar (beta ** step) is a kernel, not an ATen call.
    # Note [Combo kernels] (sched/combo.cpp): the scalar kernels of the weight and the bias are
    # one combo kernel, their updates another (four kernels before).
    torch.manual_seed(0)
    m = torch.nn.Linear(16, 8)
    ref = copy.deepcopy(m)
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    ref_opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
    x = torch.randn(4, 16)
    step = torch.compile(opt.step, backend="ember")
    ember.metrics.reset()
    for _ in range(3):
        for model, o, run in ((m, opt, step), (ref, ref_opt, ref_opt.step)):
            o.zero_grad()
            model(x).square().sum().backward()
            run()
        for p, q in zip(m.parameters(), ref.parameters()):
            torch.testing.assert_close(p, q)
    snap = ember.metrics.snapshot()
    assert snap["kernels"] == 2 and snap["extern_steps"] == 0, snap


# Kernels of the compiled steps, whatever the number of parameters (up to sched/combo.h's
# kMaxComboParts): Adam and AdamW one combo of every parameter's scalars (step count, bias
# corrections) and one of their updates; SGD one graph for its first step (the momentum buffers
# made) and one after, each one combo of every parameter's update.
KERNELS = {"Adam": 2, "AdamW": 2, "SGD": 2}


@pytest.mark.parametrize("name", ["Adam-foreach", "AdamW-foreach", "SGD-foreach"])
def test_foreach_optimizer_steps_are_kernels_not_aten_calls(name):
    """foreach=True: no _foreach_* ATen call is left (extern_steps == 0 is asserted by the
    helper), and the kernels do not grow with the parameters."""
    snap = optimizer_steps_match_eager(name, SHAPES)
    few = optimizer_steps_match_eager(name, SHAPES[:2])
    assert snap["kernels"] <= 4 and few["kernels"] <= 4, (few, snap)


@pytest.mark.parametrize("name", ["Adam", "AdamW", "SGD"])
def test_optimizer_steps_over_many_parameters_are_a_few_combo_kernels(name):
    """Ten parameters of different shapes: the per-parameter kernels of an optimizer step are
    merged into combo kernels (Note [Combo kernels]), so the step runs as a small constant number
    of kernels, as eager's foreach code runs a handful of multi-tensor kernels, not two (or one)
    per parameter."""
    snap = optimizer_steps_match_eager(name, SHAPES)
    assert snap["kernels"] == KERNELS[name], snap
    few = optimizer_steps_match_eager(name, SHAPES[:2])
    assert few["kernels"] == snap["kernels"], (few, snap)
