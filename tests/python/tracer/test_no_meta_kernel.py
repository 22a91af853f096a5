"""Ops with no meta kernel: the tracer finds result metadata by running the real kernel once on
zero-filled tensors of the traced geometry (src/tracer/trace_session.cpp, run_on_zeros)."""

import torch

import ember
from ember.testing import check_model

_lib = torch.library.Library("ember_test", "DEF")
_lib.define("scale_shift(Tensor x, float a) -> Tensor")
_lib.define("transpose_copy_nometa(Tensor x) -> Tensor")


def _scale_shift(x, a):
    return x * a + 1


def _transpose_copy(x):
    return x.t().contiguous().t()  # column-major result: strides must come from the real kernel


_lib.impl("scale_shift", _scale_shift, "CPU")
_lib.impl("transpose_copy_nometa", _transpose_copy, "CPU")


def test_op_without_meta_kernel_is_traced():
    assert not torch._C._dispatch_has_kernel_for_dispatch_key("ember_test::scale_shift", "Meta")
    graph = ember.trace(lambda x: torch.ops.ember_test.scale_shift(x, 3.0).relu(), [torch.randn(4, 5)])
    assert graph.ops == ["ember_test::scale_shift", "aten::relu"]


def test_op_without_meta_kernel_runs_and_keeps_real_strides():
    def f(x):
        return torch.ops.ember_test.transpose_copy_nometa(x) + 1, torch.ops.ember_test.scale_shift(x, 2.0)

    x = torch.randn(3, 6)
    graph = ember.trace(f, [x])
    out = ember._C.CompiledGraph(graph)(x)
    expected = f(x)
    for a, b in zip(out, expected):
        torch.testing.assert_close(a, b)
        assert a.stride() == b.stride()
    # Through torch.compile Dynamo splits around ops it cannot fake; each piece reaching ember
    # compiles.
    check_model(f, (x,), expect_fallbacks=0)
