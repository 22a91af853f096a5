"""A group norm on CUDA with few groups in all and many elements per group is traced as two
stages of sums (src/tracer/split_reduction.h): partials per channel, then per group. Traced
here for a cuda:0 the inputs only claim (nothing runs); tests/python/gpu runs it against eager."""

import pytest
import torch
import torch.nn.functional as F

import ember

BF16 = torch.bfloat16


def _gln(x, w, b):  # ConvTasNet's global layer norm
    return F.group_norm(x, 1, w, b, eps=1e-8)


def test_global_layer_norm_is_split():
    x, w, b = torch.randn(8, 512, 4001), torch.randn(512), torch.randn(512)
    graph = ember.trace(_gln, [x, w, b], device="cuda:0")
    text = str(graph)
    assert "aten::native_group_norm" not in graph.ops, text
    # First stage: one partial per channel (4096 rows of 4001), then per group (8 rows of 512).
    assert "f32[8, 1, 512] cuda:0 = aten::sum.dim_IntList" in text, text
    assert "f32[8, 1] cuda:0 = aten::sum.dim_IntList" in text, text
    assert graph.ops.count("aten::sum.dim_IntList") == 4 and "aten::rsqrt" in graph.ops, text


def test_bf16_input_is_reduced_in_f32_and_returned_in_bf16():
    x = torch.randn(4, 256, 2048, dtype=BF16)
    graph = ember.trace(lambda x: F.group_norm(x, 2, None, None), [x], device="cuda:0")
    text = str(graph)
    assert "aten::native_group_norm" not in graph.ops, text
    assert "f32[4, 2, 128] cuda:0 = aten::sum.dim_IntList" in text, text
    assert text.count("bf16[4, 256, 2048] cuda:0") >= 2, text  # the input and the output


@pytest.mark.parametrize("case", ["many_rows", "small_rows", "cpu", "one_channel_per_group",
                                  "channels_last"])
def test_left_alone(case):
    dev = "cuda:0"
    if case == "many_rows":  # 32 samples x 32 groups: enough programs already
        x, groups = torch.randn(32, 512, 256), 32
    elif case == "small_rows":
        x, groups = torch.randn(2, 64, 64), 1
    elif case == "cpu":
        x, groups, dev = torch.randn(8, 512, 4001), 1, None
    elif case == "one_channel_per_group":
        x, groups = torch.randn(1, 4, 1 << 17), 4
    else:
        x, groups = torch.randn(2, 64, 64, 64).to(memory_format=torch.channels_last), 1
    graph = ember.trace(lambda x: F.group_norm(x, groups), [x], device=dev)
    assert "aten::native_group_norm" in graph.ops, str(graph)


def test_whole_tensor_sum_and_mean_are_split_in_f32():
    x = torch.randn(4, 1024, 1024, dtype=BF16)
    graph = ember.trace(lambda x: (x.sum(), x.mean((1, 2), keepdim=True)), [x], device="cuda:0")
    text = str(graph)
    # Partials in f32 (4096 rows of 1024, and 4 x 4096 of 256), summed, rounded once to bf16.
    assert "f32[1, 4096] cuda:0 = aten::sum.dim_IntList" in text, text
    assert "f32[4, 4096] cuda:0 = aten::sum.dim_IntList" in text, text
    assert "aten::mul.Scalar" in graph.ops and "bf16[4, 1, 1] cuda:0 = aten::view" in text, text


def test_amax_over_a_long_row_is_split():
    x = torch.randn(2, 1 << 20)
    text = str(ember.trace(lambda x: x.amax(-1), [x], device="cuda:0"))
    assert "f32[2, 4096] cuda:0 = aten::amax" in text and "f32[2] cuda:0 = aten::amax" in text, text


@pytest.mark.parametrize("case", ["many_rows", "leading_dim", "prime_length", "short"])
def test_simple_reductions_left_alone(case):
    if case == "many_rows":
        x, fn = torch.randn(4096, 1024), lambda x: x.sum(-1)
    elif case == "leading_dim":  # a column reduction: not one run per row
        x, fn = torch.randn(1 << 18, 4), lambda x: x.sum(0)
    elif case == "prime_length":
        x, fn = torch.randn(2, 1048573), lambda x: x.sum(-1)
    else:
        x, fn = torch.randn(4, 4096), lambda x: x.mean()
    graph = ember.trace(fn, [x], device="cuda:0")
    assert len(graph.ops) == 1, str(graph)


def test_a_dim_named_twice_still_raises():
    # The split must not accept what the op itself rejects.
    x = torch.randn(2, 1 << 20)
    with pytest.raises(Exception, match="duplicate|multiple times"):
        ember.trace(lambda x: x.sum((1, 1)), [x], device="cuda:0")
