"""Note [f32 attention on CUDA] (rewrite/attention_rewrite.h): an f32 attention call with a row
mask on CUDA, TF32 products allowed and no dropout, is recorded in the math form (two batched
products and _safe_softmax, which the scheduler fuses) instead of the memory-efficient kernel.
Traced for cuda:0 on a machine with no GPU (nothing runs); tests/python/gpu/test_cuda.py runs it,
and checks that bf16 and TF32-off calls keep the fused kernel."""

import pytest
import torch
import torch.nn.functional as F

import ember


def attention(q, k, v, rows):
    # transformers' bidirectional mask under compilation: `q_idx >= 0` expanded over the keys.
    m = rows.view(1, 1, 128, 1).expand(2, 1, 128, 128)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m)


@pytest.fixture
def tf32():
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    yield
    torch.backends.cuda.matmul.allow_tf32 = before


def test_f32_row_mask_attention_on_cuda_is_the_math_form(tf32):
    q, k, v = (torch.randn(2, 4, 128, 64) for _ in range(3))
    rows = torch.rand(128) > 0.2
    text = str(ember.trace(attention, (q, k, v, rows), device="cuda:0"))
    assert text.count("aten::bmm") == 2 and "aten::_safe_softmax" in text, text
    assert "_scaled_dot_product_" not in text and "aten::where.self" in text, text
    # Eager's (math) result is contiguous; so is the traced one (no strides printed).
    result = text.split("return (")[1].split(")")[0]
    assert f"  {result} : f32[2, 4, 128, 64] cuda:0 = " in text, text

