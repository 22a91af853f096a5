"""Reductions fused with their pointwise prologues and epilogues (docs/design/scheduler.md,
"Reduction prologues and epilogues"): the input of a reduction computed inline, and the values of
its shape after it stored by the same kernel. Differential against eager, with the kernel counts
of the fused patterns (RMSNorm, softmax(x * scale + mask), layer_norm(x + residual), BERT's
embeddings + layer_norm, manual layer_norm / softmax) asserted."""

import pytest
import torch
import torch.nn.functional as F

from kernel_check import run

FLOATS = [torch.float32, torch.float64, torch.bfloat16]


def t5_rms_norm(x, w):
    variance = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
    h = x * torch.rsqrt(variance + 1e-6)
    if w.dtype in (torch.float16, torch.bfloat16):
        h = h.to(w.dtype)
    return w * h


def llama_rms_norm(x, w):
    dtype = x.dtype
    h = x.to(torch.float32)
    variance = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(variance + 1e-5)
    return w * h.to(dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("norm", [t5_rms_norm, llama_rms_norm])
def test_rms_norm_is_one_kernel(norm, dtype):
    x = torch.randn(4, 16, 64).to(dtype)
    w = torch.randn(64).to(dtype)
    # f64 inputs: the variance is an f32 mean (as eager), whose rounding differs by summation order.
    tol = dict(atol=1e-6, rtol=1e-6) if dtype == torch.float64 else {}
    run(norm, x, w, kernels=1, **tol)


@pytest.mark.parametrize("shape", [(4, 1, 64), (1, 1, 1), (0, 64), (3, 5, 1)])
def test_rms_norm_edge_shapes(shape):
    run(llama_rms_norm, torch.randn(shape), torch.randn(shape[-1]))


def test_rms_norm_large_rows_in_parallel():
    run(llama_rms_norm, torch.randn(64, 96, 256), torch.randn(256), kernels=1)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("mask_shape", [(2, 1, 1, 16), (2, 1, 16, 16), (16,)])
def test_scaled_masked_softmax_is_one_kernel(mask_shape, dtype):
    scores = torch.randn(2, 4, 16, 16).to(dtype)
    mask = torch.where(torch.rand(mask_shape) > 0.2, 0.0, -1e9).to(dtype)
    run(lambda s, m: torch.softmax(s * 0.125 + m, dim=-1), scores, mask, kernels=1)


def test_softmax_prologue_over_other_dims_and_strides():
    run(lambda s: torch.softmax(s * 2 - 1, dim=1), torch.randn(3, 40, 5), kernels=1)
    run(lambda s: torch.log_softmax(s.transpose(-1, -2) * 3, dim=-1), torch.randn(2, 24, 8),
        kernels=1)
    run(lambda s: torch.softmax(s[:, ::2] + 1, dim=-1), torch.randn(6, 40), kernels=1)


@pytest.mark.parametrize("dtype", FLOATS)
def test_layer_norm_of_residual_add_is_one_kernel(dtype):
    x, r = torch.randn(4, 16, 64).to(dtype), torch.randn(4, 16, 64).to(dtype)
    w, b = torch.randn(64).to(dtype), torch.randn(64).to(dtype)
    run(lambda x, r, w, b: F.layer_norm(x + r, (64,), w, b), x, r, w, b, kernels=1)


def bert_embeddings(ids, token_types, word, typ, pos, w, b):
    positions = torch.arange(ids.shape[1])
    e = F.embedding(ids, word) + F.embedding(token_types, typ) + F.embedding(positions, pos)
    return F.layer_norm(e, (word.shape[1],), w, b, 1e-12)


def test_bert_embeddings_and_layer_norm_are_one_kernel():
    args = (torch.randint(0, 50, (2, 8)), torch.randint(0, 2, (2, 8)), torch.randn(50, 32),
            torch.randn(2, 32), torch.randn(8, 32), torch.randn(32), torch.randn(32))
    run(bert_embeddings, *args, kernels=1)


def test_out_of_range_index_in_a_prologue_raises_as_eager():
    args = [torch.randint(0, 50, (2, 8)), torch.randint(0, 2, (2, 8)), torch.randn(50, 32),
            torch.randn(2, 32), torch.randn(8, 32), torch.randn(32), torch.randn(32)]
    compiled = torch.compile(bert_embeddings, backend="ember")
    with torch.no_grad():
        torch.testing.assert_close(compiled(*args), bert_embeddings(*args))
        args[0] = args[0].clone()
        args[0][1, 3] = 50
        with pytest.raises(IndexError):
            bert_embeddings(*args)
        with pytest.raises(IndexError):
            compiled(*args)


def test_manual_layer_norm_is_one_kernel():
    def f(x):
        var, mean = torch.var_mean(x, -1, keepdim=True, correction=0)
        return (x - mean) * torch.rsqrt(var + 1e-5)

    run(f, torch.randn(16, 48), kernels=1)


def test_manual_softmax_is_two_kernels():
    def f(x):
        e = (x - x.amax(-1, keepdim=True)).exp()
        return e / e.sum(-1, keepdim=True)

    run(f, torch.randn(8, 32), kernels=2)


def test_epilogue_reading_another_row_is_not_fused():
    # Row i reads the sum of row 7 - i: written by another row of the loop, so a kernel of its own.
    run(lambda x: x / x.sum(-1, keepdim=True).flip(0), torch.randn(8, 16) + 4, kernels=2)


def test_epilogue_and_prologue_over_outer_dims():
    # The reduced dim is not the innermost: the outer (tiled) layout.
    run(lambda x: x / (x * 2).sum(0, keepdim=True), torch.rand(16, 300) + 1, kernels=1)
    run(lambda x: x - x.mean((0, 2), keepdim=True), torch.randn(6, 5, 7), kernels=1)


def test_single_large_row_split_in_chunks():
    # One row of 2^20 elements: summed in parallel chunks, then the epilogue pass.
    run(lambda x: x / (x * x).sum(), torch.randn(1 << 20), kernels=1, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("op", ["argmax", "amax", "logsumexp", "any", "var", "prod"])
def test_prologues_of_every_kind(op):
    fns = {
        "argmax": lambda x: (x.abs() - 1).argmax(-1),
        "amax": lambda x: (x * -1).amax(1),
        "logsumexp": lambda x: torch.logsumexp(x * 2, -1),
        "any": lambda x: (x > 1).any(-1),
        "var": lambda x: (x + 1).var(0),
        "prod": lambda x: (x * 0.5 + 1).prod(-1),
    }
    run(fns[op], torch.randn(7, 33), kernels=1)


def test_integer_prologue():
    run(lambda x: (x * 3 + 1).sum(-1), torch.randint(-5, 5, (4, 9)), kernels=1)


def test_expensive_input_is_realized_once():
    # exp + tanh cost more than recomputing them in every pass over the row is worth.
    run(lambda x: torch.softmax(torch.tanh(x).exp(), -1), torch.randn(8, 64), kernels=2)


def test_expensive_input_behind_a_view_realizes_the_computed_value():
    # OPT's final LayerNorm: layer_norm(view(residual + ...)) whose sum is too costly to inline:
    # the sum is stored by its kernel and the layer norm reads it through the view.
    def f(x, y):
        h = (torch.tanh(x).exp() + y).view(2, 8, 32)
        return F.layer_norm(h, (32,))

    run(f, torch.randn(16, 32), torch.randn(16, 32), kernels=2)


def test_fusion_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("EMBER_REDUCTION_FUSION", "0")
    x, w = torch.randn(4, 16, 64), torch.randn(64)
    run(llama_rms_norm, x, w, kernels=3)


def test_horizontal_siblings_of_one_input_share_a_kernel():
    # Pointwise siblings of one shape are outputs of one loop nest; a reduction's siblings of its
    # input's shape join its kernel as epilogues (they read x at their own element).
    run(lambda x: (x.sin(), x.cos(), x * 2), torch.randn(8, 32), kernels=1)
    run(lambda x: (x.sum(-1), x * 2), torch.randn(8, 32), kernels=1)
    # softmax + exp | amax | amax - 1 (a value of the reduced shape is not an epilogue yet).
    run(lambda x: (torch.softmax(x, -1), x.exp(), x.amax(-1) - 1), torch.randn(8, 32), kernels=3)


@pytest.mark.parametrize("seed", range(20))
def test_random_prologue_reduction_epilogue(seed):
    # Random shapes, reduced dims, layouts and reductions, with a pointwise prologue and an
    # epilogue that reads the reduction at its own row: differential against eager.
    g = torch.Generator().manual_seed(seed)
    rank = int(torch.randint(1, 4, (1,), generator=g))
    big = seed >= 14  # large enough for the parallel and chunked loop layouts
    shape = [int(s) for s in torch.randint(1, 64 if big else 9, (rank,), generator=g)]
    if big:
        shape = [max(s, 40) for s in shape] if rank > 1 else [200000]
    dims = sorted({int(d) for d in torch.randint(0, rank, (int(torch.randint(1, rank + 1, (1,), generator=g)),), generator=g)})
    op = ["sum", "mean", "amax", "amin", "var", "logsumexp", "softmax"][seed % 7]
    x = torch.randn(shape, generator=g)
    b = torch.randn(shape[-1], generator=g)
    if seed % 3 == 1 and rank >= 2:
        x = x.transpose(0, rank - 1).contiguous().transpose(0, rank - 1)  # column-major input

    def f(x, b):
        h = x * 0.5 + b  # prologue
        if op == "softmax":
            r = torch.softmax(h, dims[0])
        elif op == "var":
            r = h.var(dims, keepdim=True)
        elif op == "logsumexp":
            r = torch.logsumexp(h, dims, keepdim=True)
        else:
            r = getattr(h, op)(dims, keepdim=True)
        return (h - r) * 2  # epilogue: reads r at its row (or element)

    run(f, x, b, kernels=1, **({"atol": 1e-4, "rtol": 1e-4} if big else {}))


# Note [Sibling reductions]: sums (means, prods, amaxes, amins) over one space fold into one pass.
@pytest.mark.parametrize("dtype", FLOATS)
def test_batch_norm_backward_sums_are_one_kernel(dtype):
    # sum(g) and sum(g * x^) with g a ReLU's masked gradient; dx joins as the epilogue.
    def f(g, x, r, m, s):
        g = torch.where(r > 0, g, 0)
        xh = (x - m) * s
        a, b = g.sum(0), (g * xh).sum(0)
        return a, b, (g - a / 64 - xh * (b / 64)) * s

    args = [torch.randn(64, 32).to(dtype) for _ in range(3)] + [torch.randn(32), torch.rand(32)]
    run(f, *args, kernels=1)


def test_siblings_of_every_kind_over_rows_and_columns():
    x = torch.randn(12, 40)
    run(lambda x: (x.sum(-1), x.amax(-1), x.amin(-1, keepdim=True), (x * x).mean(-1),
                   x.abs().prod(-1)), x, kernels=1)
    run(lambda x: (x.sum(0), x.exp().sum(0), x.amax(0)), x, kernels=1)


def test_a_reduction_of_a_sibling_result_is_not_a_sibling():
    # var from the mean: the second reads the first's result, so it runs after it.
    run(lambda x: (x.mean(0), (x - x.mean(0)).pow(2).sum(0)), torch.randn(50, 7), kernels=2)


def test_siblings_over_other_spaces_stay_apart():
    x = torch.randn(6, 9)
    run(lambda x: (x.sum(0), x.sum(1), x.argmax(1)), x, kernels=3)


def swin_window_reverse_norm(windows, shortcut, w, b):
    # Swin's block end: windows back to the image (a permute), the cyclic shift undone (roll),
    # the residual added, then the next norm: a gather prologue before a multi-pass reduction.
    B, H, W, C = shortcut.shape
    x = windows.view(B, H // 4, W // 4, 4, 4, C).permute(0, 1, 3, 2, 4, 5).reshape(B, H, W, C)
    x = shortcut + torch.roll(x, shifts=(2, 2), dims=(1, 2))
    return F.layer_norm(x, (C,), w, b)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("reduce", ["layer_norm", "softmax", "log_softmax", "var", "logsumexp"])
def test_gather_prologue_of_a_multi_pass_reduction(reduce, dtype):
    # Note [A prologue kept in a scratch row]: the prologue is computed once per element and the
    # later passes read it back; the result is eager's.
    windows, shortcut = torch.randn(2 * 4, 4, 4, 48).to(dtype), torch.randn(2, 8, 8, 48).to(dtype)
    w, b = torch.randn(48).to(dtype), torch.randn(48).to(dtype)
    if reduce == "layer_norm":
        run(swin_window_reverse_norm, windows, shortcut, w, b, kernels=1)
        return
    ops = {"softmax": lambda x: torch.softmax(x, -1), "log_softmax": lambda x: torch.log_softmax(x, -1),
           "var": lambda x: x.var(-1), "logsumexp": lambda x: torch.logsumexp(x, -1)}

    def f(s, t):
        return ops[reduce](torch.roll(s, 3, dims=1).transpose(1, 2) + t)

    run(f, torch.randn(3, 40, 24).to(dtype), torch.randn(3, 24, 40).to(dtype), kernels=1)


@pytest.mark.parametrize("reduce", ["sum", "softmax", "layer_norm"])
def test_reduction_of_a_permuted_copy(reduce):
    # Note [Reduction loops in the order of what the prologue reads]: the loops follow the
    # channels-last buffer the prologue reads, not the copy's contiguous layout.
    x = torch.randn(2, 16, 5, 7).to(memory_format=torch.channels_last)
    ops = {"sum": lambda y: y.sum(-1), "softmax": lambda y: torch.softmax(y, -1),
           "layer_norm": lambda y: F.layer_norm(y, (35,))}
    run(lambda x: ops[reduce]((x * 3).contiguous().view(2, 16, 35)), x, kernels=1)
