"""debug.host_step_times (EMBER_HOST_STEP_TIMES): each run of a graph compiled with it sums its
host time per kind of executor step (generated kernels, ATen calls, views) and per run into
process totals, ember._C.host_step_times() (src/runtime/host_times.h); a graph compiled without
it adds nothing."""

from __future__ import annotations

import torch

import ember
import ember._C as C
from ember.tracing import trace_with_structure


def f(x, w):
    # an ATen matrix product, a view of its result, a fused kernel of the rest
    y = (x @ w).view(4, 2, 16)
    return torch.relu(y) * 2 + 1


def compiled_graph(timed: bool):
    graph, _ = trace_with_structure(f, [torch.randn(4, 8), torch.randn(8, 32)])
    options = {**ember.config.compile_options(), "debug.host_step_times": timed}
    return C.CompiledGraph(graph, options=options)


def test_each_step_of_each_run_is_counted_under_its_kind():
    compiled = compiled_graph(True)
    assert compiled.num_kernels >= 1 and compiled.num_extern_steps >= 1, compiled.describe_steps()
    x, w = torch.randn(4, 8), torch.randn(8, 32)
    C.reset_host_step_times()
    for _ in range(3):
        torch.testing.assert_close(compiled(x, w)[0], f(x, w))
    t = C.host_step_times()
    assert set(t) == {"kernel", "extern", "matmul", "view", "run", "guards"}, t
    assert t["guards"]["count"] == 0  # a graph compiled alone has no guards
    assert t["run"]["count"] == 3
    assert t["kernel"]["count"] == 3 * compiled.num_kernels, (t, compiled.describe_steps())
    steps = sum(t[k]["count"] for k in ("kernel", "extern", "matmul", "view"))
    assert steps == 3 * len(compiled.describe_steps()), (t, compiled.describe_steps())
    assert all(v["seconds"] > 0 for v in t.values() if v["count"]), t
    # The steps' time is part of the runs'.
    assert sum(t[k]["seconds"] for k in ("kernel", "extern", "matmul", "view")) \
        <= t["run"]["seconds"]
    C.reset_host_step_times()
    assert all(v["count"] == 0 and v["seconds"] == 0 for v in C.host_step_times().values())


def test_ember_compile_counts_its_guard_checks_outside_the_runs(monkeypatch):
    """Under ember.compile each call's guard check (its sources read, its guards checked) is
    counted as "guards", apart from the graph's run."""
    monkeypatch.setenv("EMBER_HOST_STEP_TIMES", "1")
    model = torch.nn.Sequential(*[torch.nn.Linear(8, 8) for _ in range(4)])
    compiled = ember.compile(model)
    x = torch.randn(2, 8)
    with torch.no_grad():
        compiled(x)  # compiles
        C.reset_host_step_times()
        for _ in range(3):
            torch.testing.assert_close(compiled(x), model(x))
    t = C.host_step_times()
    assert t["guards"]["count"] == 3 and t["run"]["count"] == 3, t
    assert t["guards"]["seconds"] > 0, t


def test_a_graph_compiled_without_it_adds_nothing():
    compiled = compiled_graph(False)
    C.reset_host_step_times()
    compiled(torch.randn(4, 8), torch.randn(8, 32))
    assert all(v["count"] == 0 for v in C.host_step_times().values())
