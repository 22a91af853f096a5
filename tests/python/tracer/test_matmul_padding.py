"""Large matrix products on CUDA whose leading dimensions are not multiples of 16 bytes are traced
as products of zero-padded operands, sliced back (src/rewrite/matmul_padding.h). Traced here for a
cuda:0 the inputs only claim (nothing runs); tests/python/gpu runs them against eager."""

import pytest
import torch
import torch.nn.functional as F

import ember

BF16 = torch.bfloat16


def _ops(fn, args, device="cuda:0"):
    return ember.trace(fn, args, device=device).ops


def test_language_model_head_pads_the_vocabulary():
    # GPT-2's head: 768 -> 50257 columns, the weight read transposed.
    x, w = torch.randn(4096, 768, dtype=BF16), torch.randn(50257, 768, dtype=BF16)
    graph = ember.trace(lambda x, w: x @ w.t(), [x, w], device="cuda:0")
    text = str(graph)
    assert graph.ops.count("aten::constant_pad_nd") == 1 and "aten::mm" in graph.ops, text
    # The weight is padded in its own orientation (rows), not transposed by the copy.
    assert "bf16[50264, 768] cuda:0 = aten::constant_pad_nd" in text, text
    assert "bf16[4096, 50264] cuda:0 = aten::mm" in text, text
    assert "bf16[4096, 50257]{50264, 1} cuda:0 = aten::slice.Tensor" in text, text
    # Contiguous again, as eager's result.
    assert "bf16[4096, 50257] cuda:0 = aten::clone" in text.splitlines()[-3], text


def test_linear_with_bias_pads_the_bias():
    x, w, b = (torch.randn(4096, 768, dtype=BF16), torch.randn(30522, 768, dtype=BF16),
               torch.randn(30522, dtype=BF16))
    text = str(ember.trace(lambda x, w, b: F.linear(x, w, b), [x, w, b], device="cuda:0"))
    assert "bf16[30528] cuda:0 = aten::constant_pad_nd" in text, text
    assert "bf16[4096, 30528] cuda:0 = aten::addmm" in text, text


def test_unaligned_inner_dimension_pads_both_operands():
    a, b = torch.randn(2048, 1001), torch.randn(1001, 2048)
    text = str(ember.trace(lambda a, b: a @ b, [a, b], device="cuda:0"))
    assert "f32[2048, 1004] cuda:0 = aten::constant_pad_nd" in text, text
    assert "f32[1004, 2048] cuda:0 = aten::constant_pad_nd" in text, text
    assert "aten::slice" not in text, text  # the result's own dims are aligned


def test_batched_product():
    a, b = torch.randn(16, 512, 64, dtype=BF16), torch.randn(16, 64, 1021, dtype=BF16)
    text = str(ember.trace(lambda a, b: torch.bmm(a, b), [a, b], device="cuda:0"))
    assert "bf16[16, 512, 1024] cuda:0 = aten::bmm" in text, text


@pytest.mark.parametrize("case", ["aligned", "small", "cpu", "int"])
def test_left_alone(case):
    if case == "aligned":
        args, dev = [torch.randn(4096, 768, dtype=BF16), torch.randn(50264, 768, dtype=BF16)], "cuda:0"
    elif case == "small":
        args, dev = [torch.randn(64, 768, dtype=BF16), torch.randn(1001, 768, dtype=BF16)], "cuda:0"
    elif case == "cpu":
        args, dev = [torch.randn(4096, 768, dtype=BF16), torch.randn(50257, 768, dtype=BF16)], None
    else:
        args, dev = [torch.ones(4096, 768, dtype=torch.int64),
                     torch.ones(50257, 768, dtype=torch.int64)], "cuda:0"
    assert "aten::constant_pad_nd" not in _ops(lambda x, w: x @ w.t(), args, dev)
