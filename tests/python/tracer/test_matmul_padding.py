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
    # (Logits under 64 MiB: larger ones are made in row blocks, the test after the next.)
    x, w = torch.randn(512, 768, dtype=BF16), torch.randn(50257, 768, dtype=BF16)
    graph = ember.trace(lambda x, w: x @ w.t(), [x, w], device="cuda:0")
    text = str(graph)
    assert graph.ops.count("aten::constant_pad_nd") == 1 and "aten::mm" in graph.ops, text
    # The weight is padded in its own orientation (rows), not transposed by the copy.
    assert "bf16[50264, 768] cuda:0 = aten::constant_pad_nd" in text, text
    assert "bf16[512, 50264] cuda:0 = aten::mm" in text, text
    assert "bf16[512, 50257]{50264, 1} cuda:0 = aten::slice.Tensor" in text, text
    # Contiguous again, as eager's result.
    assert "bf16[512, 50257] cuda:0 = aten::clone" in text.splitlines()[-3], text


def test_linear_with_bias_pads_the_bias():
    x, w, b = (torch.randn(1024, 768, dtype=BF16), torch.randn(30522, 768, dtype=BF16),
               torch.randn(30522, dtype=BF16))
    text = str(ember.trace(lambda x, w, b: F.linear(x, w, b), [x, w, b], device="cuda:0"))
    assert "bf16[30528] cuda:0 = aten::constant_pad_nd" in text, text
    assert "bf16[1024, 30528] cuda:0 = aten::addmm" in text, text


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


def test_a_large_padded_result_in_inference_is_made_in_row_blocks():
    # Note [Padded products in row blocks]: a head's logits of 64 MiB or more, columns padded, in
    # inference: ember::matmul_sliced writes the contiguous result block by block, instead of the
    # padded product and its contiguous copy (both alive at the copy: the logits twice).
    x, w, b = (torch.randn(8192, 768, dtype=BF16), torch.randn(30522, 768, dtype=BF16),
               torch.randn(30522, dtype=BF16))
    with torch.no_grad():
        text = str(ember.trace(lambda x, w, b: F.linear(x, w, b), [x, w, b], device="cuda:0"))
    assert "bf16[8192, 30522] cuda:0 = ember::matmul_sliced" in text, text
    assert "bf16[30528, 768] cuda:0 = aten::constant_pad_nd" in text, text  # the weight, its rows
    assert "bf16[30528] cuda:0 = aten::constant_pad_nd" in text, text  # the bias
    assert "aten::addmm" not in text and "aten::clone" not in text, text
    # Below 64 MiB, as before.
    with torch.no_grad():
        text = str(ember.trace(lambda x, w, b: F.linear(x, w, b), [x[:1024], w, b],
                               device="cuda:0"))
    assert "ember::matmul_sliced" not in text and "aten::addmm" in text, text


@pytest.mark.parametrize("bias", [False, True])
def test_matmul_sliced_is_the_sliced_product_in_blocks(bias):
    # 1000 rows of 40000 f32 columns: blocks of 384 rows (64 MiB of scratch at most, in whole
    # tiles of 128 rows, 256 rows at least), the last one partial; the result is contiguous, as eager's sliced product would be
    # after .contiguous().
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(1000, 8, generator=g), torch.randn(8, 40000, generator=g)
    c = torch.randn(40000, generator=g) if bias else None
    out = torch.ops.ember.matmul_sliced(a, b, c, 39997)
    want = (a @ b + (c if bias else 0))[:, :39997]
    assert out.is_contiguous() and out.shape == (1000, 39997)
    torch.testing.assert_close(out, want, atol=1e-4, rtol=1e-5)
    with pytest.raises(RuntimeError, match="matmul_sliced"):
        torch.ops.ember.matmul_sliced(a, b, c, 40001)


def test_matmul_sliced_runs_as_an_extern_step():
    # Recorded whole by the tracer (its meta kernel gives the shape), run by the executor through
    # the dispatcher.
    import ember._C as C

    a, b = torch.randn(300, 16), torch.randn(16, 24)
    f = lambda a, b: torch.relu(torch.ops.ember.matmul_sliced(a, b, None, 21)) + 1  # noqa: E731
    graph = ember.trace(f, [a, b])
    assert "ember::matmul_sliced" in graph.ops, str(graph)
    compiled = C.CompiledGraph(graph)
    torch.testing.assert_close(compiled(a, b)[0], f(a, b))
