"""torch.optim steps through ember.compile (the capture path): the interpreter inlines torch.optim's
code (src/capture/interp/call_library.cpp, `is_inlined_library_code`), so a step becomes one graph
whose parameter and state updates are in-place mutations of its inputs, guarded like any frame.
The first step creates the optimizer's state and runs eagerly; later steps run the graph from
C++ (a cache hit of the hook, no Python frame). Parameters and state against eager's."""

import copy

import pytest
import torch
import torch.nn as nn

import ember
import ember._C
import ember.metrics

OPTIMIZERS = {
    "SGD": lambda ps: torch.optim.SGD(ps, lr=0.1),
    "SGD-momentum": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=1e-2),
    "SGD-nesterov": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True),
    "SGD-foreach": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=1e-2,
                                              foreach=True),
    "Adam": lambda ps: torch.optim.Adam(ps, lr=1e-2),
    "Adam-weight-decay": lambda ps: torch.optim.Adam(ps, lr=1e-2, weight_decay=1e-2),
    "Adam-amsgrad": lambda ps: torch.optim.Adam(ps, lr=1e-2, amsgrad=True),
    "Adam-foreach": lambda ps: torch.optim.Adam(ps, lr=1e-2, foreach=True),
    "AdamW": lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1),
    "AdamW-foreach": lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1, foreach=True),
}

# Optimizers whose first step creates state (`self.state[p]` has no entry yet): it runs eagerly.
STATELESS = {"SGD"}


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))


def _set_grads(model, seed):
    g = torch.Generator().manual_seed(seed)
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=g)


def _assert_same(model, opt, ref, ref_opt):
    """Parameters and per-parameter state (step, exp_avg, exp_avg_sq, momentum_buffer, ...)."""
    for (name, p), q in zip(ref.named_parameters(), model.parameters()):
        torch.testing.assert_close(q, p, msg=lambda m: f"{name}: {m}")
        expected, actual = ref_opt.state[p], opt.state[q]
        assert actual.keys() == expected.keys(), name
        for key, value in expected.items():
            if isinstance(value, torch.Tensor):
                torch.testing.assert_close(actual[key], value, msg=lambda m: f"{name} {key}: {m}")
            else:
                assert actual[key] == value, (name, key)


def _step_both(i, model, opt, step, ref, ref_opt):
    """Step i: the same gradients on both models, eager's step and the compiled one, then
    parameters and state compared."""
    _set_grads(ref, i)
    _set_grads(model, i)
    ref_opt.step()
    step()
    _assert_same(model, opt, ref, ref_opt)


def _hook_stats():
    return ember._C.capture_hook_stats()


def _pair(name):
    ref = _model()
    model = copy.deepcopy(ref)
    return model, OPTIMIZERS[name](model.parameters()), ref, OPTIMIZERS[name](ref.parameters())


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_step_is_one_captured_graph_matching_eager(name):
    model, opt, ref, ref_opt = _pair(name)
    step = ember.compile(opt.step)
    for i in range(5):
        _set_grads(ref, i)
        _set_grads(model, i)
        if i == 1:
            first = ember.metrics.snapshot()
            reasons = list(ember.metrics.fallback_reasons)
            hooks = _hook_stats()
        ref_opt.step()  # first: its first call imports what record_function needs
        assert step() is None
        _assert_same(model, opt, ref, ref_opt)
    after = ember.metrics.snapshot()
    if name in STATELESS:
        assert first["captured_frames"] == 1 and first["eager_frames"] == 0, [r[-900:] for r in reasons]
    else:
        # The first step creates the state: eager this call, with its reason, never a break.
        assert first["captured_frames"] == 0 and first["eager_frames"] == 1, reasons
        assert "has no entry" in reasons[0] and "creates its state" in reasons[0], reasons
    # Then one graph, captured whole (no break inside the step), and run on every later call.
    assert after["captured_frames"] == 1, ember.metrics.fallback_reasons
    assert after["graph_breaks"] == 0, ember.metrics.fallback_reasons
    assert after["eager_frames"] == first["eager_frames"], ember.metrics.fallback_reasons
    assert after["graphs"] >= 1 and after["nodes"] > 0
    now = _hook_stats()
    calls = 5 - 1 - (0 if name in STATELESS else 1)  # calls after the one that captured
    assert now["cache_hits"] - hooks["cache_hits"] >= calls
    assert now["eager_frames"] == hooks["eager_frames"]


def test_adam_step_graph_mutates_parameters_and_state():
    # The graph's inputs are the parameters, their gradients and the state tensors; the updates
    # are mutations of the parameters and of step, exp_avg and exp_avg_sq (no graph output).
    model, opt, ref, ref_opt = _pair("Adam")
    for i in range(2):
        _set_grads(model, i)
        opt.step()  # eagerly: the state exists
    info = ember.explain(opt.step)()
    assert info.graph_count == 1 and info.graph_break_count == 0, info.break_reasons
    ops = info.ops_per_graph[0]
    for op in ("lerp", "addcmul", "sqrt", "addcdiv"):
        assert any(op in o for o in ops), ops
    n = len(list(model.parameters()))
    assert info.graphs[0].count("mutat") >= 1 or "copy_" in info.graphs[0], info.graphs[0]
    assert info.guards[0].count("param_groups[0]['params']") >= n


def test_changing_lr_between_calls_is_honoured():
    # lr is a float in param_groups: guarded by value, so a new lr compiles a new graph (as under
    # Dynamo); the old graph is not run with a stale lr.
    model, opt, ref, ref_opt = _pair("Adam")
    step = ember.compile(opt.step)
    lrs = [1e-2, 1e-2, 5e-2, 5e-2, 1e-3, 1e-2]
    for i, lr in enumerate(lrs):
        for group in opt.param_groups + ref_opt.param_groups:
            group["lr"] = lr
        _step_both(i, model, opt, step, ref, ref_opt)
    counters = ember.metrics.snapshot()
    # Call 1 eager (state), then one graph per lr value; the last call reuses the first graph.
    assert counters["captured_frames"] == 3, ember.metrics.fallback_reasons
    assert counters["graph_breaks"] == 0


def test_tensor_lr_is_a_graph_input():
    # A tensor lr is read as a graph input: changing it in place needs no new graph.
    ref = _model()
    model = copy.deepcopy(ref)
    opt = torch.optim.Adam(model.parameters(), lr=torch.tensor(1e-2))
    ref_opt = torch.optim.Adam(ref.parameters(), lr=torch.tensor(1e-2))
    step = ember.compile(opt.step)
    for i, lr in enumerate([1e-2, 1e-2, 5e-2, 1e-3]):
        for group in opt.param_groups + ref_opt.param_groups:
            group["lr"].fill_(lr)
        _step_both(i, model, opt, step, ref, ref_opt)
    counters = ember.metrics.snapshot()
    assert counters["captured_frames"] == 1 and counters["eager_frames"] == 1, (
        ember.metrics.fallback_reasons)


def test_step_pre_and_post_hooks_are_inlined():
    # The hooks run inside the graph (a tensor counter: appending to a list would be guarded by
    # its length, a new graph per call).
    model, opt, ref, ref_opt = _pair("SGD-momentum")
    counts = {opt: torch.zeros(2), ref_opt: torch.zeros(2)}

    def hooks(count):
        def pre(o, args, kwargs):
            count[0].add_(1)

        def post(o, args, kwargs):
            count[1].add_(1)

        return pre, post

    for o in (opt, ref_opt):
        pre, post = hooks(counts[o])
        o.register_step_pre_hook(pre)
        o.register_step_post_hook(post)
    step = ember.compile(opt.step)
    for i in range(4):
        _set_grads(ref, i)
        _set_grads(model, i)
        ref_opt.step()
        if i == 1:
            first = ember.metrics.snapshot()  # the first, eager call captured the hooks alone
        step()
        _assert_same(model, opt, ref, ref_opt)
    torch.testing.assert_close(counts[opt], counts[ref_opt])
    torch.testing.assert_close(counts[opt], torch.tensor([4.0, 4.0]))
    after = ember.metrics.snapshot()
    assert after["captured_frames"] == first["captured_frames"] + 1, ember.metrics.fallback_reasons
    assert after["graph_breaks"] == first["graph_breaks"] == 0


def _train_step(model, opt, x, y):
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    return loss


def _train_step_zero_grad_last(model, opt, x, y):
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss.detach()


@pytest.mark.parametrize("name", ["SGD-momentum", "Adam", "AdamW"])
@pytest.mark.parametrize("train_step", [_train_step, _train_step_zero_grad_last])
def test_whole_training_step_matches_eager(name, train_step):
    model, opt, ref, ref_opt = _pair(name)
    x, y = torch.randn(16, 4), torch.randn(16, 3)
    compiled = ember.compile(train_step)
    for i in range(4):
        ref_loss = train_step(ref, ref_opt, x, y)
        loss = compiled(model, opt, x, y)
        torch.testing.assert_close(loss, ref_loss)
        _assert_same(model, opt, ref, ref_opt)
        if i == 1:
            hooks = _hook_stats()
            counters = ember.metrics.snapshot()
    # Three graphs: the forward (a training graph) up to Tensor.backward's break, the optimizer's
    # step (after zero_grad's break, or up to it), and the rest. Only the first step (creating the
    # state) ran eagerly; from the third call on every frame is a cache hit.
    assert counters["captured_frames"] == 3, ember.metrics.fallback_reasons
    assert counters["graph_breaks"] == 2 and counters["eager_frames"] == 1, counters
    assert counters["training_graphs"] >= 1
    assert any("Tensor.backward" in r for r in ember.metrics.fallback_reasons)
    assert any("Optimizer.zero_grad" in r for r in ember.metrics.fallback_reasons)
    assert ember.metrics.snapshot() == counters, ember.metrics.fallback_reasons
    now = _hook_stats()
    assert now["eager_frames"] == hooks["eager_frames"]
    assert now["compiles"] == hooks["compiles"]


def test_optimizer_step_then_scheduler_step():
    # LR schedulers stay graph breaks (their methods never run at capture time). The break after
    # the step's graph, which mutates its inputs, reads the state's tensors from their sources.
    model, opt, ref, ref_opt = _pair("SGD-momentum")
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    ref_sched = torch.optim.lr_scheduler.StepLR(ref_opt, step_size=2, gamma=0.5)

    def step(opt, sched, x):
        opt.step()
        sched.step()
        return x

    compiled = ember.compile(step)
    x = torch.randn(2)
    for i in range(5):
        _set_grads(ref, i)
        _set_grads(model, i)
        step(ref_opt, ref_sched, x)
        assert compiled(opt, sched, x) is x
        _assert_same(model, opt, ref, ref_opt)
        assert opt.param_groups[0]["lr"] == ref_opt.param_groups[0]["lr"]
    counters = ember.metrics.snapshot()
    # One graph per lr the scheduler sets (lr is guarded by value), each ending at the
    # scheduler's step, a graph break.
    assert counters["eager_frames"] == 1 and counters["graph_breaks"] == 3, counters
    assert all("LRScheduler.step" in r for r in ember.metrics.fallback_reasons[1:])


def test_first_step_under_fullgraph_runs_eagerly_without_raising():
    model, opt, ref, ref_opt = _pair("Adam")
    step = ember.compile(opt.step, fullgraph=True)
    for i in range(3):
        _step_both(i, model, opt, step, ref, ref_opt)
    assert ember.metrics.snapshot()["captured_frames"] == 1


def test_step_after_dynamo_wrapped_the_optimizers():
    # Once torch.compile has run, Dynamo wraps every optimizer's _init_group (and the fused
    # updates) in torch._dynamo.disable: the wrapped function is inlined all the same.
    torch._dynamo.eval_frame.TorchPatcher.patch()
    assert hasattr(torch.optim.Adam._init_group, "_torchdynamo_orig_callable")
    model, opt, ref, ref_opt = _pair("Adam")
    step = ember.compile(opt.step)
    for i in range(3):
        _step_both(i, model, opt, step, ref, ref_opt)
    counters = ember.metrics.snapshot()
    assert counters["captured_frames"] == 1 and counters["eager_frames"] == 1, (
        ember.metrics.fallback_reasons)
