"""native_batch_norm(training=True) updates its running statistics in place although its schema
does not say so. When they are graph inputs the tracer records the functional form plus input
mutations (src/tracer/trace_session.cpp, record_batch_norm_update); otherwise it keeps the op."""

import torch

import ember
from ember import _C


def _bn(x, rm, rv, w, b):
    return torch.native_batch_norm(x, w, b, rm, rv, True, 0.2, 1e-5)


def test_input_running_stats_become_functional_form_and_mutations():
    w, b = torch.randn(5), torch.randn(5)
    graph = ember.trace(lambda x, rm, rv: _bn(x, rm, rv, w, b)[0],
                        [torch.randn(3, 5, 4), torch.zeros(5), torch.ones(5)])
    assert graph.ops == ["aten::_native_batch_norm_legit_functional"]
    assert graph.num_mutations == 2


def test_constant_running_stats_keep_the_op():
    rm, rv = torch.zeros(5), torch.ones(5)
    graph = ember.trace(lambda x: _bn(x, rm, rv, None, None)[0], [torch.randn(3, 5, 4)])
    assert graph.ops == ["aten::native_batch_norm"]
    assert graph.num_mutations == 0


def test_module_buffers_under_trace_update_as_eager():
    # ember.trace of a module: the buffers are constants, and the ATen call updates them.
    torch.manual_seed(0)
    bn, ref = torch.nn.BatchNorm2d(4).train(), torch.nn.BatchNorm2d(4).train()
    x = torch.randn(2, 4, 3, 3)
    compiled = _C.CompiledGraph(ember.trace(bn, [x]))
    with torch.no_grad():
        for _ in range(2):
            compiled(x)
            ref(x)
    torch.testing.assert_close(bn.running_mean, ref.running_mean, rtol=0, atol=0)
    torch.testing.assert_close(bn.running_var, ref.running_var, rtol=0, atol=0)


def test_running_stats_updated_twice_in_one_graph():
    w, b = torch.randn(5), torch.randn(5)

    def f(x, rm, rv):
        y = _bn(x, rm, rv, w, b)[0]
        return _bn(y * 2, rm, rv, w, b)[0]

    args = [torch.randn(3, 5, 4), torch.randn(5), torch.rand(5) + 0.5]
    graph = ember.trace(f, args)
    assert graph.ops.count("aten::_native_batch_norm_legit_functional") == 2
    assert graph.num_mutations == 2
    eager, compiled = [a.clone() for a in args], [a.clone() for a in args]
    torch.testing.assert_close(_C.CompiledGraph(graph)(*compiled)[0], f(*eager))
    # The second update reads the first's output, which may differ from eager's in the last bit.
    torch.testing.assert_close(compiled[1], eager[1])
    torch.testing.assert_close(compiled[2], eager[2])
