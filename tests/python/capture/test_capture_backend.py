"""ember.compile(fn, backend=...): each captured graph as a torch.fx.GraphModule of ATen ops for
another backend (a callable, "eager", "inductor"), checked against eager."""

from __future__ import annotations

import copy
import operator

import pytest
import torch

from capture_check import check, expect_frames, same

import ember
import ember.errors
import ember.metrics

aten = torch.ops.aten


def r(*shape):
    return torch.randn(*shape)


class Recorder:
    """A backend that records the GraphModules and example inputs it gets and returns a callable
    that counts its calls and runs the module as it is."""

    def __init__(self):
        self.graphs: list[torch.fx.GraphModule] = []
        self.examples: list[list] = []
        self.calls = 0

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        self.examples.append(list(example_inputs))

        def run(*args):
            self.calls += 1
            return gm(*args)
        return run


def targets(gm) -> list:
    """The call_function targets of `gm`, operator.getitem left out."""
    return [n.target for n in gm.graph.nodes
            if n.op == "call_function" and n.target is not operator.getitem]


def assert_aten_module(gm):
    """Placeholders, get_attr, ATen OpOverload calls (and getitem on their results), output."""
    assert isinstance(gm, torch.fx.GraphModule)
    for n in gm.graph.nodes:
        assert n.op in ("placeholder", "get_attr", "call_function", "output"), n.format_node()
        if n.op == "call_function" and n.target is not operator.getitem:
            assert isinstance(n.target, torch._ops.OpOverload), n.format_node()
            assert n.target.namespace == "aten", n.format_node()


def test_callable_backend_gets_aten_graph_module_and_real_example_inputs():
    def f(x, y):
        return (x @ y).relu() + 1

    rec = Recorder()
    x, y = r(2, 3), r(3, 4)
    check(f, x, y, backend=rec, atol=1e-4)  # two calls, then one with fresh values: one graph
    assert len(rec.graphs) == 1
    gm = rec.graphs[0]
    assert_aten_module(gm)
    assert targets(gm) == [aten.mm.default, aten.relu.default, aten.add.Tensor]
    add = next(n for n in gm.graph.nodes if n.target is aten.add.Tensor)
    assert add.args[1] == 1  # a Python scalar stays a scalar, as in torch's graphs
    assert len([n for n in gm.graph.nodes if n.op == "placeholder"]) == 2
    examples = rec.examples[0]
    assert [type(t) for t in examples] == [torch.Tensor, torch.Tensor]
    assert [t.shape for t in examples] == [x.shape, y.shape]
    assert rec.calls == 3  # the backend's callable ran every call (ember's Executor did not)
    snap = ember.metrics.snapshot()
    assert snap["graphs"] == 1 and snap["nodes"] == 3 and snap["kernels"] == 0


def test_callable_backend_multiple_results_views_and_constants():
    def f(x):
        z = x * torch.tensor([1.0, 2.0, 3.0, 4.0])
        a, b = z.split(2, dim=1)
        values, indices = torch.max(z, 1)
        return a.t(), b.sum(0), values, indices

    rec = Recorder()
    check(f, r(3, 4), backend=rec)
    gm = rec.graphs[0]
    assert_aten_module(gm)
    assert aten.split.Tensor in targets(gm) and aten.max.dim in targets(gm)
    assert [n.op for n in gm.graph.nodes].count("get_attr") == 1  # the torch.tensor data
    assert torch.equal(gm._tensor_constant0, torch.tensor([1.0, 2.0, 3.0, 4.0]))


def test_graph_break_gives_one_graph_module_per_graph():
    def f(x):
        y = x.sin() * 2
        print("", end="")  # not capturable: the frame breaks here into two graphs
        return y.cos() + x

    rec = Recorder()
    compiled = ember.compile(f, backend=rec)
    ember.metrics.reset()
    for _ in range(2):
        same(compiled, f, r(5))
    expect_frames(captured=2, eager=0)
    assert ember.metrics.snapshot()["graph_breaks"] == 1
    assert len(rec.graphs) == 2
    assert [targets(gm) for gm in rec.graphs] == [[aten.sin.default, aten.mul.Tensor],
                                                  [aten.cos.default, aten.add.Tensor]]

    rec = Recorder()
    out = ember.explain(f, backend=rec)(r(5))
    assert out.graph_count == len(rec.graphs) == 2
    assert out.graph_break_count == 1
    assert out.ops_per_graph == [[t.name() for t in targets(gm)] for gm in rec.graphs]


def test_eager_backend_with_dtype_device_layout_and_memory_format_arguments():
    def f(x, y):
        h = torch.cat([x, y], dim=0).softmax(-1)
        ones = torch.ones(5, dtype=torch.float64, device=x.device, layout=torch.strided)
        z = torch.empty_like(h, memory_format=torch.contiguous_format).fill_(0.5)
        return h.mean(0, keepdim=True), h.to(torch.float64) + ones, h.t().contiguous() * z.t()

    rec = Recorder()
    check(f, r(2, 5), r(3, 5), backend=rec)
    kwargs = [n.kwargs for n in rec.graphs[0].graph.nodes if n.op == "call_function"]
    ones = {"dtype": torch.float64, "layout": torch.strided, "device": torch.device("cpu"),
            "pin_memory": False}  # keyword-only arguments of aten.ones, as torch objects
    assert ones in kwargs
    assert any(kw.get("memory_format") is torch.contiguous_format for kw in kwargs)
    check(f, r(2, 5), r(3, 5), backend="eager")


def test_input_mutation_through_callable_backend():
    def f(x, y):
        x.add_(1)
        return x * y

    rec = Recorder()
    check(f, r(4), r(4), backend=rec)  # also compares the arguments after each call
    assert len(rec.graphs) == 1
    gm = rec.graphs[0]
    assert_aten_module(gm)
    assert targets(gm)[-1] is aten.copy_.default  # the mutation, after the graph's nodes
    copy_node = next(n for n in gm.graph.nodes if n.target is aten.copy_.default)
    assert copy_node.args[0].op == "placeholder"


def test_mutated_input_returned_is_the_input():
    def f(x):
        x.mul_(2)
        return x

    compiled = ember.compile(f, backend=Recorder())
    x = torch.ones(3)
    for expected in (2.0, 4.0):
        out = compiled(x)
        assert out is x
        assert torch.equal(x, torch.full((3,), expected))


def test_batch_norm_running_statistics_through_eager_backend():
    eager = torch.nn.BatchNorm1d(3).train()
    model = copy.deepcopy(eager)
    rec = Recorder()
    compiled = ember.compile(model, backend=rec)
    with torch.no_grad():  # parameters require grad: capture is inference-only
        for _ in range(2):
            x = r(8, 3)
            torch.testing.assert_close(compiled(x), eager(x))
    assert len(rec.graphs) == 1
    # num_batches_tracked, the running mean and the running variance
    assert targets(rec.graphs[0]).count(aten.copy_.default) == 3
    torch.testing.assert_close(model.running_mean, eager.running_mean)
    torch.testing.assert_close(model.running_var, eager.running_var)
    assert int(model.num_batches_tracked) == int(eager.num_batches_tracked) == 2


@pytest.fixture
def inductor_compiles(monkeypatch):
    """Counts the graphs backend="inductor" hands to Inductor's compile_fx."""
    import torch._inductor.compile_fx as compile_fx_module
    real = compile_fx_module.compile_fx
    seen = []

    def counting(gm, example_inputs, *args, **kwargs):
        seen.append(gm)
        return real(gm, example_inputs, *args, **kwargs)
    monkeypatch.setattr(compile_fx_module, "compile_fx", counting)
    return seen


def test_inductor_backend_function(inductor_compiles):
    def f(x, y):
        return torch.tanh(x @ y) * 2 + y.sum()

    check(f, r(4, 4), r(4, 4), backend="inductor", atol=1e-4, rtol=1e-4)
    assert len(inductor_compiles) == 1
    assert_aten_module(inductor_compiles[0])


def test_inductor_backend_module(inductor_compiles):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU())
    with torch.no_grad():
        check(model, r(3, 8), backend="inductor", atol=1e-4, rtol=1e-4)
    assert len(inductor_compiles) == 1
    assert aten.relu.default in targets(inductor_compiles[0])


@pytest.mark.parametrize("backend", [42, "nosuch", None])
def test_unknown_backend_raises(backend):
    with pytest.raises(ember.errors.CompileError) as info:
        ember.compile(lambda x: x + 1, backend=backend)
    msg = str(info.value)
    assert repr(backend) in msg
    for accepted in ("'ember'", "'inductor'", "'eager'", "callable"):
        assert accepted in msg


def test_backend_that_raises_names_the_error():
    def broken(gm, example_inputs):
        raise ValueError("no such lowering")

    compiled = ember.compile(lambda x: x.exp(), backend=broken)
    with pytest.raises(ember.errors.CompileError) as info:
        compiled(r(3))
    msg = str(info.value)
    assert "broken" in msg and "ValueError: no such lowering" in msg


def test_backend_returning_a_non_callable():
    compiled = ember.compile(lambda x: x.exp(), backend=lambda gm, example_inputs: None)
    with pytest.raises(ember.errors.CompileError, match="expected a callable"):
        compiled(r(3))


def test_backend_callable_with_wrong_outputs():
    compiled = ember.compile(lambda x: x.exp(), backend=lambda gm, example_inputs: lambda *a: 7)
    with pytest.raises(RuntimeError, match="expected a tuple or list of 1 tensors"):
        compiled(r(3))
