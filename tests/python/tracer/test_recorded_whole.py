"""The ops the tracer records whole, and the ops ember's rewrites put kernels on above autograd,
are registered at import, never skipped (src/tracer/dispatch.cpp, kRecordedWhole: an op this
torch lacked would raise Unsupported at import, naming it)."""

import torch
import torch.nn.functional as F

import ember


def test_the_ops_recorded_whole_have_the_tracer_kernels():
    for key in ("PrivateUse1", "AutogradPrivateUse1"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key("aten::one_hot", key), key


def test_the_rewrite_kernels_above_autograd_are_registered():
    for op in ("aten::scaled_dot_product_attention", "aten::batch_norm"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(op, "AutogradPrivateUse1"), op


def test_one_hot_is_recorded_as_it_is():
    graph = ember.trace(lambda t: F.one_hot(t, 5), [torch.tensor([0, 3, 1])])
    assert graph.ops == ["aten::one_hot"]
