"""fullgraph=True, ember.explain, threads and exceptions raised by the program."""

from __future__ import annotations

import os
import threading

import pytest
import torch

from capture_check import check, expect_frames, line_of, same

import ember
import ember.errors


def r(*shape):
    return torch.randn(*shape)


def test_fullgraph_supported_program():
    def f(x, y):
        return (x @ y).relu() + 1
    check(f, r(2, 3), r(3, 4), fullgraph=True, atol=1e-4)


def test_fullgraph_print_raises_unsupported_with_location():
    def f(x):
        y = x + 1
        print("side effect")
        return y
    c = ember.compile(f, fullgraph=True)
    with pytest.raises(ember.Unsupported) as info:
        c(r(3))
    msg = str(info.value)
    assert "print" in msg
    assert os.path.basename(__file__) in msg
    assert str(line_of(f, 'print("side effect")')) in msg


def test_fullgraph_item_raises_data_dependent_error():
    def f(x):
        return x * x.sum().item()
    c = ember.compile(f, fullgraph=True)
    with pytest.raises(ember.errors.DataDependentError) as info:
        c(r(3))
    msg = str(info.value)
    assert "item" in msg
    assert os.path.basename(__file__) in msg
    assert str(line_of(f, ".item()")) in msg


def test_fullgraph_tensor_condition_raises_data_dependent_error():
    def f(x):
        if x.sum() > 0:
            return x
        return -x
    c = ember.compile(f, fullgraph=True)
    with pytest.raises(ember.errors.DataDependentError) as info:
        c(r(3))
    assert str(line_of(f, "if x.sum() > 0")) in str(info.value)


def test_fullgraph_unsupported_in_callee_names_callee_line():
    def helper(x):
        print("inside helper")
        return x

    def f(x):
        return helper(x) + 1
    c = ember.compile(f, fullgraph=True)
    with pytest.raises(ember.Unsupported) as info:
        c(r(3))
    msg = str(info.value)
    assert "print" in msg
    assert str(line_of(helper, 'print("inside helper")')) in msg


def test_fullgraph_unsupported_is_compile_error():
    def f(x):
        return torch.from_numpy(x.numpy())
    c = ember.compile(f, fullgraph=True)
    with pytest.raises(ember.CompileError):
        c(r(3))


def test_fullgraph_module():
    lin = torch.nn.Linear(4, 2)
    with torch.no_grad():
        check(lin, r(3, 4), fullgraph=True)


def test_explain_captured_program():
    def f(x):
        return x.sin() + x.cos()
    out = ember.explain(f)(r(3))
    assert out.graph_count == 1
    assert out.graph_break_count == 0
    assert out.break_reasons == []
    assert len(out.ops_per_graph) == 1 and out.ops_per_graph[0]
    assert "Graph count: 1" in str(out)


def test_explain_eager_frame_with_captured_callee():
    def g(x):
        return x * 2

    def f(x):
        print("break")
        return g(x)
    out = ember.explain(f)(r(3))
    assert out.graph_count >= 1  # g (or, with graph breaks, the rest of f after the print)
    assert out.graph_break_count == 1
    assert any("print" in reason for reason in out.break_reasons)


def test_explain_reports_item_reason():
    def f(x):
        return x + x.mean().item()
    out = ember.explain(f)(r(3))
    assert out.graph_break_count == 1
    assert "item" in out.break_reasons[0]
    # the frame runs eagerly (no graphs), or breaks at .item() into a graph before and one after
    assert out.graph_count == (2 if "graph break" in out.break_reasons[0] else 0)


def test_explain_guards_mention_inputs():
    def f(x, n):
        return x * n
    out = ember.explain(f)(r(3), 4)
    assert out.graph_count == 1
    assert len(out.guards) == 1 and out.guards[0]


def test_threads_call_same_compiled_function():
    def f(x, y):
        return (x * y).sum(1) + x.mean()
    c = ember.compile(f)
    ember.metrics.reset()
    inputs = [(r(4, 5), r(4, 5)) for _ in range(8)]
    results = [None] * len(inputs)
    errors = []
    barrier = threading.Barrier(2)

    def worker(k):
        try:
            barrier.wait()
            for i in range(k, len(inputs), 2):
                results[i] = c(*inputs[i])
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for (x, y), got in zip(inputs, results):
        torch.testing.assert_close(got, f(x, y))
    snap = ember.metrics.snapshot()
    assert snap["eager_frames"] == 0, ember.metrics.fallback_reasons


def test_threads_with_different_shapes():
    def f(x):
        return x.softmax(-1) * 2
    c = ember.compile(f)
    results = {}

    def worker(n):
        outs = []
        for _ in range(3):
            x = r(n, 3)
            outs.append((x, c(x)))
        results[n] = outs

    threads = [threading.Thread(target=worker, args=(n,)) for n in (2, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for outs in results.values():
        for x, got in outs:
            torch.testing.assert_close(got, f(x))


def test_program_raises_value_error():
    def f(x, n):
        if n < 0:
            raise ValueError(f"negative n: {n}")
        return x * n
    c = ember.compile(f)
    with pytest.raises(ValueError, match="negative n"):
        c(r(3), -1)
    x = r(3)
    torch.testing.assert_close(c(x, 2), x * 2)
    with pytest.raises(ValueError):
        c(r(3), -5)


def test_program_raises_value_error_after_capture():
    """The frame is captured for n >= 0 first; a later call with n < 0 must still raise."""
    def f(x, n):
        if n < 0:
            raise ValueError("negative")
        return x + n
    c = ember.compile(f)
    x = r(3)
    torch.testing.assert_close(c(x, 1), x + 1)
    with pytest.raises(ValueError, match="negative"):
        c(x, -1)
    torch.testing.assert_close(c(x, 1), x + 1)


def test_program_raises_in_helper():
    def check_shape(x):
        if x.dim() != 2:
            raise ValueError("expected 2-d")
        return x

    def f(x):
        return check_shape(x) * 2
    c = ember.compile(f)
    x = r(2, 2)
    torch.testing.assert_close(c(x), x * 2)
    with pytest.raises(ValueError, match="expected 2-d"):
        c(r(3))


def test_torch_error_propagates():
    def f(x, y):
        return x @ y
    c = ember.compile(f)
    with pytest.raises(RuntimeError):
        c(r(2, 3), r(2, 3))
    x, y = r(2, 3), r(3, 2)
    torch.testing.assert_close(c(x, y), x @ y)


def test_key_error_and_index_error_propagate():
    def f(d, xs, x):
        return x * d["k"] + xs[5]
    c = ember.compile(f)
    with pytest.raises(KeyError):
        c({}, [1] * 6, r(2))
    with pytest.raises(IndexError):
        c({"k": 1}, [1], r(2))


def test_assert_statement_on_python_value():
    def f(x, n):
        assert n > 0, "n must be positive"
        return x * n
    c = ember.compile(f)
    x = r(2)
    torch.testing.assert_close(c(x, 3), x * 3)
    with pytest.raises(AssertionError, match="positive"):
        c(x, 0)


def test_compile_as_decorator_and_with_options():
    @ember.compile
    def f(x):
        return x * 2

    g = ember.compile(fullgraph=True)(lambda x: x + 1)
    x = r(3)
    torch.testing.assert_close(f(x), x * 2)
    torch.testing.assert_close(g(x), x + 1)


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune", "default"])
def test_modes_on_the_cpu_compile_as_the_default(mode):
    # CUDA graphs are for graphs on a CUDA device (tests/python/gpu); a CPU graph under
    # mode="reduce-overhead" runs its program as usual, with no note and no warning.
    import warnings

    from ember import _C

    c = ember.compile(lambda x: (x * 2).relu(), mode=mode)
    ember.metrics.reset()
    before = _C.cuda_graph_replays()
    x = r(3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(3):
            torch.testing.assert_close(c(x), (x * 2).relu())
    assert ember.metrics.snapshot()["codegen_notes"] == 0
    assert _C.cuda_graph_replays() == before
    with pytest.raises(ember.CompileError, match="unknown mode"):
        ember.compile(lambda x: x, mode="fast")


def test_compile_rejects_unknown_backend():
    with pytest.raises(ember.CompileError):
        ember.compile(lambda x: x, backend="nope")


def test_metrics_nodes_and_graphs_counted():
    def f(x):
        return x.exp() + 1
    c = ember.compile(f)
    ember.metrics.reset()
    same(c, f, r(3))
    snap = ember.metrics.snapshot()
    assert snap["graphs"] == 1 and snap["nodes"] >= 1
    expect_frames(1, 0)


def test_records_time_each_pipeline_step():
    # Each frame compile's record carries the compile pipeline's step times
    # (runtime::Program::step_seconds; scripts/compile_time.py sums them); a training graph's
    # backward steps are named "backward:<step>".
    before = len(ember.capture.records())
    x = r(4, 8)
    same(ember.compile(lambda x: (x.sin() * 2).sum(-1)), lambda x: (x.sin() * 2).sum(-1), x)
    rec = ember.capture.records()[before]
    names = [name for name, _ in rec["step_seconds"]]
    assert "schedule" in names and "generate_kernels" in names, names
    assert all(sec >= 0 for _, sec in rec["step_seconds"])
    # (The scheduler's phases, "schedule/<phase>", are parts of "schedule".)
    assert any(name.startswith("schedule/build x") for name in names), names
    assert sum(sec for name, sec in rec["step_seconds"] if "/" not in name) <= rec["seconds"]
    w = torch.randn(8, 8, requires_grad=True)
    ember.compile(lambda x: (x @ w).tanh().sum())(x).backward()
    rec = ember.capture.records()[-1]
    assert rec["training"]
    assert any(name.startswith("backward:") for name, _ in rec["step_seconds"])


# --- torch.compile's conventions (issue 37) --------------------------------------------------


def _compiles():
    return ember._C.capture_hook_stats()["compiles"]


def test_torch_compiler_reset_clears_ember_compile_caches():
    # As it clears torch.compile's: the next call of an ember.compile'd function compiles again.
    def f(x):
        return torch.sin(x) * 3

    c = ember.compile(f)
    x = r(4)
    same(c, f, x)
    before = _compiles()
    same(c, f, x)
    assert _compiles() == before  # its entry
    torch.compiler.reset()
    same(c, f, x)
    assert _compiles() == before + 1


def test_dynamo_recompile_limit_is_ember_compiles_default(recwarn):
    # ember.config.cache_size_limit defaults to torch._dynamo.config.recompile_limit, read at
    # ember.compile (an explicit ember setting or EMBER_CACHE_SIZE_LIMIT wins).
    def f(x, n):
        return x * n

    with torch._dynamo.config.patch(recompile_limit=2):
        assert ember.config.cache_size_limit == 2
        c = ember.compile(f)
    before = _compiles()
    for n in range(5):
        same(c, f, r(3), n)
    assert _compiles() - before == 2
    assert any("cache size limit" in str(w.message) for w in recwarn.list)
    with torch._dynamo.config.patch(recompile_limit=2), ember.config.patch(cache_size_limit=4):
        assert ember.config.cache_size_limit == 4


def test_disable_returns_the_model_itself():
    # torch.compile's disable=: nothing is compiled, the model is returned as it is.
    m = torch.nn.Linear(4, 4)
    assert ember.compile(m, disable=True) is m
    assert ember.compile(disable=True)(m) is m
    f = lambda x: x + 1  # noqa: E731
    assert ember.compile(f, disable=True) is f
