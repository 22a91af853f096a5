"""The executor's Triton path, end to end: a traced graph is scheduled, each fused group becomes
a generated Triton kernel, and the graph runs them (in Triton's interpreter on the CPU, compiled
and launched from C++ on a GPU). Differential against eager, with kernel counts; a kernel with
no Triton form makes the graph run unfused with the reason recorded."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import ember
import ember._C as C
from triton_check import DEVICE, INTERPRET


def run(fn, *args, kernels=None, atol=1e-5, rtol=1e-5):
    args = tuple(a.to(DEVICE) for a in args)
    graph = ember.trace(fn, args)
    compiled = C.CompiledGraph(graph, triton_interpret=INTERPRET)
    assert compiled.codegen_error == "", compiled.codegen_error
    assert list(compiled.refused_kernels) == [], compiled.refused_kernels
    if kernels is not None:
        assert compiled.num_kernels == kernels, compiled.describe_steps()
    got = compiled(*args)
    want = fn(*args)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g, w, atol=atol, rtol=rtol, equal_nan=True)
    assert all("kernel" in s or "view" in s or "extern" in s for s in compiled.describe_steps())
    return compiled


def r(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype)


def test_pointwise_chain_is_one_kernel():
    run(lambda x, b: F.gelu(x + b) * torch.sigmoid(x) - 1, r(64, 96), r(96), kernels=1)


def test_broadcast_and_transposed_input():
    x = r(40, 30).t()  # strided
    run(lambda x, y: (x * y).tanh() + x.exp(), x, r(30, 1), kernels=1)


def test_row_reductions_and_softmax():
    run(lambda x: (x.sum(-1), x.amax(-1), x.mean(-1)), r(8, 300))
    run(lambda x: torch.softmax(x, -1), r(8, 300), kernels=1)
    run(lambda x: F.log_softmax(x, -1), r(4, 1000))


def test_sibling_reductions_share_one_triton_kernel():
    # Note [Sibling reductions]: one accumulator each in one pass, over rows (one block per row)
    # and over columns (2D tiles), the second input computed inline.
    run(lambda x: (x.sum(-1), x.amax(-1), (x * x).mean(-1)), r(8, 300), kernels=1)
    run(lambda x: (x.sum(0), (x * x).sum(0), x.amin(0)), r(300, 40), kernels=1, atol=1e-4)

    def bn_backward_sums(g, x, m, s):  # channels-last: the kept channels are innermost
        g = torch.where(x > 0, g, 0)
        return g.sum((0, 2, 3)), (g * (x - m.view(1, -1, 1, 1)) * s.view(1, -1, 1, 1)).sum((0, 2, 3))

    cl = torch.channels_last
    run(bn_backward_sums, r(4, 24, 6, 6).to(memory_format=cl), r(4, 24, 6, 6).to(memory_format=cl),
        r(24), r(24), kernels=1, atol=1e-4, rtol=1e-4)


def test_softmax_in_f32_cast_back_writes_only_the_cast():
    """Eager attention's softmax(x, dtype=float32).to(bf16): the f32 result is read only by the
    cast in the same kernel, so the persistent row keeps it in registers and stores only the bf16
    result (LayoutLM on the H200: the f32 store doubled the kernel's traffic)."""
    def f(x):
        return F.softmax(x * 0.125, dim=-1, dtype=torch.float32).to(torch.bfloat16)
    c = run(f, r(2, 3, 40, 40, dtype=torch.bfloat16), kernels=1, atol=1e-2, rtol=1e-2)
    assert c.num_unwritten_outputs == 1
    def g(x):  # the f32 result is a graph output too: written
        y = F.softmax(x * 0.125, dim=-1, dtype=torch.float32)
        return y, y.to(torch.bfloat16)
    c = run(g, r(2, 40, dtype=torch.bfloat16), kernels=1, atol=1e-2, rtol=1e-2)
    assert c.num_unwritten_outputs == 0


def test_safe_softmax_with_fully_masked_rows():
    x = r(6, 300)
    x[1] = -float("inf")
    x[2, 5:] = -float("inf")
    run(lambda x, b: torch.ops.aten._safe_softmax(x + b, -1), x, r(300), kernels=1)


def test_column_reductions_keep_an_array_of_accumulators_in_one_block():
    """A reduction over a leading dim: the scheduler's accumulator array becomes one block (lane
    i holds column i), walked by a serial loop over the rows; tiles of wide rows too."""
    run(lambda x: x.sum(0), r(100, 8), kernels=1, atol=1e-4)
    run(lambda x: x.amax(0), r(37, 300), kernels=1)
    run(lambda x: x.sum(0), r(37, 3000), kernels=1, atol=1e-4)
    run(lambda x: x.sum(1), r(4, 30, 6), kernels=1, atol=1e-4)
    run(lambda x: torch.var_mean(x, (0, 2, 3)), r(4, 3, 5, 5), atol=1e-4)


def test_column_tiles_fold_every_op_and_dtype():
    """A column reduction over many rows folds each 2D tile (Note [Column tiles fold in two
    dimensions]): NaN propagates through max and min, prod and any/all combine, and bf16 inputs
    sum in f32 or into a bf16 result."""
    x = r(300, 40)
    x[7, 3] = float("nan")
    x[250, 30] = float("nan")
    run(lambda x: (x.amax(0), x.amin(0)), x, kernels=1)
    run(lambda x: ((x * 0.01 + 1).prod(0), (x > 2).any(0), (x > -3).all(0)), r(300, 40), atol=1e-4)
    run(lambda x: x.sum(0), r(500, 96, dtype=torch.bfloat16), kernels=1, atol=0.5, rtol=0.02)
    run(lambda x: x.float().sum(0), r(500, 96, dtype=torch.bfloat16), kernels=1, atol=1e-3)


def test_global_pools_of_few_channels_run_in_tiles_of_16_columns():
    """Squeeze-and-excitation's pool of a channels-last activation at batch 1 (72 channels over
    28 x 28, 960 over 7 x 7): column tiles of 16 channels, the last one partial, so that the
    kernel has programs for the GPU (ScheduleOptions::min_parallel_rows). On a GPU the larger
    sums are split in stages by the tracer first (rewrite/split_reduction.h): more kernels."""
    cl = torch.channels_last
    for c, hw in ((72, 28), (960, 7), (40, 52)):
        x = r(1, c, hw, hw, dtype=torch.bfloat16).to(memory_format=cl)
        one = 1 if INTERPRET else None
        run(lambda x: x.mean((2, 3), keepdim=True), x, kernels=one, atol=1e-2, rtol=1e-2)
        run(lambda x: x.float().sum((2, 3)), x, kernels=one, atol=1e-2, rtol=1e-3)


def test_layer_norm():
    run(lambda x, w, b: F.layer_norm(x, (50,), w, b), r(6, 50), r(50), r(50), atol=1e-4)


def test_layer_norm_over_a_strided_dim():
    """A layer norm over a transposed dim (Whisper's after its convolutions) is a column
    reduction in tiles, then a serial loop over the same rows whose variable is a scalar there:
    the weight it reads at the row is one element (once read as a block, which Triton refuses)."""
    run(lambda x, w, b: F.layer_norm(x.permute(0, 2, 1), (64,), w, b), r(4, 64, 16), r(64),
        r(64), kernels=1, atol=1e-4)


def test_bf16_pointwise_rounds_like_eager():
    tol = 4e-2 if INTERPRET else 8e-3  # Triton's interpreter truncates to bf16
    run(lambda a, b: (a * b + 1).relu() / (a.abs() + 2), r(32, 64, dtype=torch.bfloat16),
        r(32, 64, dtype=torch.bfloat16), atol=tol, rtol=tol)


def test_bf16_with_python_scalars_is_one_kernel():
    # CUDA reads a Python scalar in f32 (0.1 is not a bf16); the CPU rounds it to bf16 first.
    tol = 4e-2 if INTERPRET else 8e-3
    run(lambda a: (a * 0.1 + 1 / 3).relu() * a, r(64, 32, dtype=torch.bfloat16), kernels=1,
        atol=tol, rtol=tol)


def test_constants_cast_to_half_types():
    # relu6 and where with a Python 0 cast their constants to bf16 (once emitted as `(0.0).to(..)`,
    # which Triton's compiler rejects).
    a = r(64, 40, dtype=torch.bfloat16)
    tol = 4e-2 if INTERPRET else 8e-3
    run(lambda a: torch.nn.functional.relu6(a * 4) + torch.where(a > 0, a, 0), a, kernels=1,
        atol=tol, rtol=tol)


def test_integer_ops():
    a = torch.randint(-100, 100, (200,))
    run(lambda a: (a // 7) * 3 + a % 5 - (a > 0).long(), a, atol=0, rtol=0)


def test_row_argmax_argmin_and_max_dim_follow_nan_and_tie_rules():
    x = r(8, 100)
    x[2, 5] = float("nan")
    x[3, :] = 1.0  # all tied: the first index
    x[4, 7] = x[4, 70] = 9.0
    c = run(lambda x: (x.argmax(-1), x.argmin(-1)), x, kernels=None, atol=0, rtol=0)
    assert c.num_kernels >= 1
    run(lambda x: x.max(-1), x, kernels=1, atol=0, rtol=0)


def test_kernel_without_a_triton_form_leaves_its_nodes_to_aten_with_its_reason():
    x = r(40, 6).to(DEVICE)
    # A column argmax has no Triton form: it runs as an ATen call, and the rest still fuses.
    graph = ember.trace(lambda x: (x.argmax(0) + 1, (x * 2).sin()), (x,))
    compiled = C.CompiledGraph(graph, triton_interpret=INTERPRET)
    assert compiled.codegen_error == ""
    assert len(compiled.refused_kernels) == 1 and "argmax" in compiled.refused_kernels[0]
    assert compiled.num_kernels == 1  # the + 1 after the ATen call and the sin: one combo
    assert any(s == "extern aten::argmax" for s in compiled.describe_steps())
    a, b = compiled(x)
    torch.testing.assert_close(a, x.argmax(0) + 1)
    torch.testing.assert_close(b, (x * 2).sin())


@pytest.mark.skipif(INTERPRET, reason="modules are loaded on a GPU only")
def test_identical_kernels_are_compiled_and_loaded_once():
    x, y, w = r(64, 33).to(DEVICE), r(64, 33).to(DEVICE), r(33, 33).to(DEVICE)

    def f(x, y, w):
        b = ((x * 3).sigmoid() + y).cos()
        m = b @ w  # an ATen call between two kernels with the same code
        return ((m * 3).sigmoid() + y).cos()

    before = C.num_loaded_triton_modules()
    # (The product is launch-bound: without its templates, whose configurations load modules of
    # their own, Note [Launch-bound products].)
    with ember.config.patch(launch_bound_products=0):
        compiled = C.CompiledGraph(ember.trace(f, (x, y, w)))
    assert compiled.num_kernels == 2
    names = [s.split(":")[0] for s in compiled.describe_steps() if s.startswith("kernel")]
    assert len(set(names)) < len(names)  # named by content: the repeated kernel shares a name
    assert C.num_loaded_triton_modules() - before == len(set(names))
    torch.testing.assert_close(compiled(x, y, w)[0], f(x, y, w))


@pytest.mark.skipif(not INTERPRET, reason="the interpreter path is the CPU's")
def test_cpu_graphs_use_cpp_kernels_unless_asked():
    x = r(8, 8)
    graph = ember.trace(lambda x: x.sin() + 1, (x,))
    assert "def ember_" not in C.CompiledGraph(graph).kernel_sources[0]
    assert "@triton.jit" in C.CompiledGraph(graph, triton_interpret=True).kernel_sources[0]


@pytest.mark.parametrize("channels_last", [False, True])
def test_pools_fuse_into_triton_kernels(channels_last):
    # 2D pools are index functions (src/sched/pooling.h): a max pool after a pointwise op and an
    # average pool with border windows clipped, as generated Triton kernels against eager.
    x = r(2, 6, 11, 13)
    x[0, 1, 2, 3] = float("nan")
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    run(lambda x: F.max_pool2d(torch.relu(x * 2 + 1), 3, 2, 1), x)
    run(lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False) * 3, x, kernels=1)
    run(lambda x: F.avg_pool2d(x, 3, 1, 1), x.to(torch.bfloat16), kernels=1, atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("channels_last", [False, True])
def test_depthwise_convolutions_fuse_into_triton_kernels(channels_last, monkeypatch):
    # With EMBER_DEPTHWISE_KERNELS=1, depthwise convolutions are index functions in Triton graphs
    # (src/sched/depthwise_conv.h): the window fold, its bias, the batch norm and activation after
    # it are one kernel, no ATen convolution; strides, padding, dilation, 5x5 and 7x7 windows, two
    # output channels per input channel, bf16 summed in f32. (cuDNN's f32 convolutions may run on
    # TF32: the tolerance on a GPU.)
    monkeypatch.setenv("EMBER_DEPTHWISE_KERNELS", "1")
    x = r(2, 6, 11, 13)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    w3, w5, w7, b = r(6, 1, 3, 3), r(6, 1, 5, 5), r(6, 1, 7, 7), r(6)
    w_mult, b_mult = r(12, 1, 3, 3), r(12)
    scale, shift = r(1, 6, 1, 1).to(DEVICE), r(1, 6, 1, 1).to(DEVICE)  # read by the closures
    cases = [  # (function, arguments, the op the convolution's kernel computes after it)
        (lambda x, w, b: F.silu(F.conv2d(x, w, b, 1, 1, 1, 6) * scale + shift), (x, w3, b),
         "aten::silu"),
        (lambda x, w, b: F.relu(F.conv2d(x, w, b, 2, 2, 1, 6)), (x, w5, b), "aten::relu"),
        (lambda x, w, b: F.conv2d(x, w, b, 1, 3, 1, 6) + x, (x, w7, b), "aten::add"),
        (lambda x, w, b: F.conv2d(x, w, b, (2, 1), (2, 1), (2, 1), 6).exp(), (x, w3, b),
         "aten::exp"),
        (lambda x, w, b: F.conv2d(x, w, b, 1, 1, 1, 6).sigmoid(), (x, w_mult, b_mult),
         "aten::sigmoid"),
        (lambda x, w: F.conv2d(x, w, None, 1, 0, 1, 6) * 2, (x, w3), "aten::mul"),
    ]
    # bf16: eager rounds the convolution's result before the activation, the kernel does not;
    # two bf16 ulps at magnitudes 2-4 are 0.031.
    tol = 4e-2
    bf = tuple(a.to(torch.bfloat16) for a in (x, w3, b))
    cases.append((lambda x, w, b: F.gelu(F.conv2d(x, w, b, 1, 1, 1, 6)), bf, "aten::gelu"))
    for fn, args, then in cases:
        atol = tol if args[0].dtype == torch.bfloat16 else 1e-4 if INTERPRET else 5e-3
        steps = run(fn, *args, atol=atol, rtol=atol).describe_steps()
        # (Other kernels may restride an input for the CPU's layout rules.)
        assert not any(s.startswith("extern") and "convolution" in s for s in steps), steps
        assert any(s.startswith("kernel") and "aten::convolution" in s and then in s
                   for s in steps), steps


def test_depthwise_convolutions_past_the_window_limit_stay_aten_calls(monkeypatch):
    # A 9x9 window (81 elements, ConvMixer's) stays cuDNN's, and so does a grouped convolution
    # with several channels per group; and every depthwise one by default.
    atol = 1e-4 if INTERPRET else 5e-3  # (cuDNN's TF32)
    x = r(1, 4, 12, 12)
    c = run(lambda x, w: F.conv2d(x, w, None, 1, 1, 1, 4).relu(), x, r(4, 1, 3, 3), atol=atol)
    assert any("convolution" in s for s in c.describe_steps()), c.describe_steps()
    monkeypatch.setenv("EMBER_DEPTHWISE_KERNELS", "1")
    c = run(lambda x, w: F.conv2d(x, w, None, 1, 4, 1, 4).relu(), x, r(4, 1, 9, 9), atol=atol)
    assert any("convolution" in s for s in c.describe_steps()), c.describe_steps()
    c = run(lambda x, w: F.conv2d(x, w, None, 1, 1, 1, 2).relu(), x, r(4, 2, 3, 3), atol=atol)
    assert any("convolution" in s for s in c.describe_steps()), c.describe_steps()


@pytest.mark.parametrize("case", ["transpose", "to_nhwc", "channels_last", "add_transposed",
                                  "two_layouts"])
def test_transposing_copies_run_as_2d_tiles(case):
    # A read contiguous along another dim than the write runs as 2D tiles (Form::Tiled), both
    # sides along their contiguous dim; against eager, layouts included. So does a value stored
    # in two layouts (a channels-last sum and its contiguous copy for a group norm).
    if case == "two_layouts":
        def fn(x):
            s = x + 1
            return s, s.contiguous()

        x = r(2, 40, 9, 21).to(memory_format=torch.channels_last)
    elif case == "transpose":
        fn, x = (lambda x: x.t().contiguous() * 2), r(70, 45)
    elif case == "to_nhwc":
        fn, x = (lambda x: x.permute(0, 2, 3, 1).contiguous() + 1), r(2, 33, 17, 20)
    elif case == "channels_last":
        fn, x = (lambda x: (x * 3).to(memory_format=torch.channels_last)), r(2, 40, 9, 21)
    else:
        fn, x = (lambda x: x + x.t()), r(50, 50)
    compiled = run(fn, x, kernels=1)
    src = compiled.kernel_sources[0]
    assert "tl.arange(0, XBLOCK)[None, :]" in src and "tl.arange(0, XBLOCK)[:, None]" in src, src


def test_gathers_check_each_index_they_read():
    """Triton kernels check an index where they read it (check_index: a device-side assert, as
    eager's CUDA index kernels), so gathers fuse like any read: an embedding, indices that wrap,
    and T5's position bias gathered inside the softmax that adds it."""
    table, ids = r(50, 16), torch.randint(0, 50, (4, 7))
    run(lambda t, i: F.embedding(i, t) * 2, table, ids, kernels=1)
    run(lambda x, i: x[i] + 1, r(16, 5), torch.randint(-16, 16, (8,)), kernels=1)
    bias = lambda e, b: F.embedding(b, e).permute(2, 0, 1).unsqueeze(0)  # noqa: E731
    run(lambda s, e, b: torch.softmax(s + bias(e, b), -1), r(2, 3, 9, 9), r(32, 3),
        torch.randint(0, 32, (9, 9)), kernels=1)


@pytest.mark.skipif(not INTERPRET, reason="a device-side assert ends the CUDA context")
def test_an_index_out_of_range_stops_the_kernel():
    table, ids = r(50, 16), torch.randint(0, 50, (4, 7))
    compiled = C.CompiledGraph(ember.trace(lambda t, i: F.embedding(i, t) * 2, (table, ids)),
                               triton_interpret=True)
    bad = ids.clone()
    bad[1, 2] = 50
    with pytest.raises(Exception, match="index out of range"):
        compiled(table, bad)


def test_max_autotune_matrix_templates_in_the_interpreter():
    """mode="max-autotune"'s matrix templates (runtime/matmul_template.h) through the executor:
    Linear layers (addmm with a broadcast bias over a transposed weight), mm and bmm of a
    transposed operand get the template, which the interpreter runs and keeps when it agrees
    with the ATen call; the results are eager's."""
    lin1, lin2 = torch.nn.Linear(48, 96), torch.nn.Linear(96, 40)

    def f(x, y, z):
        return lin2(F.gelu(lin1(x))), x @ z, torch.bmm(y, y.transpose(1, 2))

    args = (r(33, 48), r(3, 20, 16), r(48, 24))
    with torch.no_grad():
        graph = ember.trace(f, args)
        compiled = C.CompiledGraph(graph, triton_interpret=INTERPRET, matmul_templates=True)
        if INTERPRET:
            assert compiled.num_matmul_templates == 4, compiled.describe_steps()
        for _ in range(2):
            got, want = compiled(*args), f(*args)
            for g, w in zip(got, want):
                torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4)
        if INTERPRET:
            assert compiled.num_matmul_templates_chosen == 4


def _with_templates(f, args, templates, epilogues):
    """f's graph with matrix templates (the interpreter on the CPU), their counts checked there."""
    compiled = C.CompiledGraph(ember.trace(f, args), triton_interpret=INTERPRET,
                               matmul_templates=True)
    if INTERPRET:
        assert compiled.num_matmul_templates == templates, compiled.describe_steps()
        assert compiled.num_fused_epilogues == epilogues, compiled.describe_steps()
    return compiled


def test_max_autotune_fuses_the_pointwise_kernel_after_a_product():
    """A pointwise kernel that is the only reader of a product (a Linear's bias-add result viewed
    [B, S, N], then gelu and a residual add) becomes the template's epilogue: the first call runs
    the product and the kernel and decides (in the interpreter: the fused form when it agrees),
    later calls skip the product's step and run both in one launch. A product read by two kernels
    or by a reduction keeps a plain template."""
    lin = torch.nn.Linear(48, 96)

    def f(x, r):
        h = lin(x.view(-1, 48)).view(2, 17, 96)
        return F.gelu(h) + r, x @ torch.ones(48, 5)

    args = (r(2, 17, 48), r(2, 17, 96))
    with torch.no_grad():
        compiled = _with_templates(f, args, templates=2, epilogues=1)
        for _ in range(3):
            got, want = compiled(*args), f(*args)
            for g, w in zip(got, want):
                torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4)
        if INTERPRET:
            assert compiled.num_matmul_templates_chosen == 2

    def g(x):  # read by a kernel and a reduction: no epilogue
        h = x @ torch.ones(48, 5)
        return h.relu(), h.sum(-1)

    with torch.no_grad():
        compiled = C.CompiledGraph(ember.trace(g, (r(9, 48),)), triton_interpret=INTERPRET,
                                   matmul_templates=True)
    if INTERPRET:
        assert compiled.num_fused_epilogues == 0


def test_convolutions_get_implicit_gemm_templates():
    """Convolutions (3x3 with a bias, 7x7 strided, dilated, 1x1, a 3x3 over 32 channels, whose K
    tiles are each one window position's, one of two groups, a depthwise one with a bias) get the
    template with their input gathered (codegen::ConvOperand; a group per batch): the
    interpreter runs them, they agree with the ATen call and are kept, and the pointwise kernel
    after one becomes its epilogue."""
    w1, b1 = torch.randn(16, 8, 3, 3), torch.randn(16)
    w2, w3, w4 = torch.randn(24, 16, 7, 7), torch.randn(12, 24, 3, 3), torch.randn(32, 12, 1, 1)
    w5, w6 = torch.randn(12, 32, 3, 3), torch.randn(24, 6, 3, 3)
    dw, db = torch.randn(24, 1, 3, 3), torch.randn(24)

    def f(x):
        y = F.relu(F.conv2d(x, w1, b1, padding=1))
        y = F.conv2d(y, w2, stride=2, padding=3)
        y = F.conv2d(y, w3, padding=2, dilation=2) * 0.5 + 1
        y = F.conv2d(F.conv2d(y, w4), w5, padding=1)
        y = F.conv2d(y, w6, padding=1, groups=2)
        return F.conv2d(y, dw, db, padding=1, groups=24)

    x = r(2, 8, 11, 13)
    with torch.no_grad():
        compiled = C.CompiledGraph(ember.trace(f, (x,)), triton_interpret=INTERPRET,
                                   matmul_templates=True)
        if INTERPRET:
            assert compiled.num_matmul_templates == 7, compiled.describe_steps()
            assert compiled.num_fused_epilogues >= 1, compiled.describe_steps()
        for _ in range(3):
            got, want = compiled(x)[0], f(x)
            torch.testing.assert_close(got, want, atol=1e-3 * want.abs().max().item(), rtol=1e-3)
        if INTERPRET:
            assert compiled.num_matmul_templates_chosen == 7


def test_a_kernel_reading_two_products_takes_one_as_its_epilogue():
    """relu(x @ w1 + y @ w2) (a residual block's 1x1 convolutions as products, summed): the kernel
    is the only reader of both products but can be the epilogue of one; the other gets a plain
    template, and its result exists when the fused launch runs (it once was skipped as if fused
    too, and the second call found the kernel's input undefined)."""
    w1, w2 = torch.randn(48, 32), torch.randn(48, 32)

    def f(x, y):
        return torch.relu(x @ w1 + y @ w2)

    args = (r(40, 48), r(40, 48))
    with torch.no_grad():
        compiled = _with_templates(f, args, templates=2, epilogues=1)
        for _ in range(3):
            torch.testing.assert_close(compiled(*args)[0], f(*args), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_eager_attention_runs_as_one_sdpa_call(dtype):
    """bmm, scale, a mask added to the scores viewed [B, H, S, S], softmax, bmm (TrOCR's and BART's
    eager attention) become one ember::fused_attention node, an SDPA call (runtime/attention_fusion.h):
    the scores' product and the softmax kernel are gone. Not exact in bf16 (SDPA keeps the
    scores in f32), so compared at bf16's tolerance. A softmax read by something else, or a
    mask added after a second scale, stays as it is."""
    b, h, s, d = 2, 3, 10, 8

    def attention(q, k, v, mask):
        w = torch.bmm(q, k.transpose(1, 2)) * 0.35
        w = (w.view(b, h, s, s) + mask).view(b * h, s, s)
        return torch.bmm(F.softmax(w, dim=-1), v)

    args = (r(b * h, s, d, dtype=dtype), r(b * h, s, d, dtype=dtype), r(b * h, s, d, dtype=dtype),
            r(b, 1, s, s, dtype=dtype))
    tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=2e-2, rtol=2e-2)
    with torch.no_grad():
        graph = ember.trace(attention, args)
        c = C.CompiledGraph(graph, triton_interpret=INTERPRET, fuse_attention=True)
        assert c.num_fused_attention == 1, c.describe_steps()
        assert c.num_kernels == 0 and c.describe_steps()[-1] == "extern ember::fused_attention", \
            c.describe_steps()  # k's transposed view, then the attention in the bmm's place
        torch.testing.assert_close(c(*args)[0], attention(*args), **tol)
        off = C.CompiledGraph(graph, triton_interpret=INTERPRET, fuse_attention=False)
        assert off.num_fused_attention == 0

        def autocast_like(q, k, v, mask):  # bf16 scores + an f32 mask, softmax cast back
            w = (torch.bmm(q, k.transpose(1, 2)).view(b, h, s, s) + mask).view(b * h, s, s)
            return torch.bmm(F.softmax(w, dim=-1).to(q.dtype), v)

        mask = torch.zeros(b, 1, s, s).masked_fill(torch.ones(s, s).triu(1).bool(),
                                                    torch.finfo(torch.float32).min)
        margs = args[:3] + (mask,)
        c = C.CompiledGraph(ember.trace(autocast_like, margs), triton_interpret=INTERPRET,
                            fuse_attention=True)
        assert c.num_fused_attention == 1
        torch.testing.assert_close(c(*margs)[0], autocast_like(*margs), **tol)

        def mask_in_graph(q, k, v, keep):  # BERT's (1 - mask) * min, computed in the graph:
            m = (1.0 - keep) * torch.finfo(keep.dtype).min  # its own kernel, read by the node
            w = (torch.bmm(q, k.transpose(1, 2)).view(b, h, s, s) * 0.35 + m).view(b * h, s, s)
            return torch.bmm(F.softmax(w, dim=-1), v)

        keep = torch.ones(b, 1, 1, s, dtype=dtype)
        keep[0, ..., -3:] = 0
        kargs = args[:3] + (keep,)
        c = C.CompiledGraph(ember.trace(mask_in_graph, kargs), triton_interpret=INTERPRET,
                            fuse_attention=True)
        assert c.num_fused_attention == 1, c.describe_steps()
        torch.testing.assert_close(c(*kargs)[0], mask_in_graph(*kargs), **tol)

        def eager_4d(x, y, z, keep):  # transformers' eager_attention_forward over [b, h, s, d]
            q4, k4, v4 = (t.view(b, s, h, d).transpose(1, 2) for t in (x, y, z))
            w = torch.matmul(q4, k4.transpose(2, 3)) * 0.35
            w = w + (1.0 - keep) * torch.finfo(keep.dtype).min
            return torch.matmul(F.softmax(w, dim=-1), v4)

        xargs = tuple(t.reshape(b, s, h * d) for t in args[:3]) + (keep,)
        c = C.CompiledGraph(ember.trace(eager_4d, xargs), triton_interpret=INTERPRET,
                            fuse_attention=True)
        assert c.num_fused_attention == 1, c.describe_steps()
        torch.testing.assert_close(c(*xargs)[0], eager_4d(*xargs), **tol)
        # The key matmul copied transposed reaches SDPA with dense rows: a fused kernel, not
        # ATen's math fallback (which LayoutLM's attention took on the H200: 2x slower).
        with torch.profiler.profile() as prof:
            c(*xargs)
        ran = [e.name for e in prof.events() if "attention" in e.name]
        assert "aten::_scaled_dot_product_attention_math" not in ran, ran

        def probs_too(q, k, v):  # the probabilities are an output: nothing fused
            p = F.softmax(torch.bmm(q, k.transpose(1, 2)), dim=-1)
            return torch.bmm(p, v), p

        c = C.CompiledGraph(ember.trace(probs_too, args[:3]), triton_interpret=INTERPRET,
                            fuse_attention=True)
        assert c.num_fused_attention == 0


def test_layer_norm_over_short_rows_runs_as_row_tiles():
    """16400 rows of 96 (ConvNeXt's layer norm over channels): the scheduler's layer-norm kernel
    runs 16 rows per program (triton_codegen.md, "Row tiles"), the last program partly masked."""
    x = r(16400, 96, dtype=torch.bfloat16)
    w, b = r(96, dtype=torch.bfloat16), r(96, dtype=torch.bfloat16)
    compiled = run(lambda x, w, b: F.layer_norm(x, (96,), w, b, 1e-6), x, w, b, kernels=1,
                   atol=2e-2, rtol=2e-2)
    if INTERPRET:
        source = compiled.kernel_sources[0]
        assert "prow = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]" in source


def test_number_to_a_tensor_power():
    # aten::pow.Scalar (Adam's beta ** step) in a Triton kernel; the [1]-shaped bias term is a
    # flat kernel of one element, whose store at a constant address is one lane's.
    run(lambda s, x: (1 - 0.9 ** s) * x + 2.0 ** (x / 4), torch.rand(1) * 10, r(6, 5),
        kernels=2, atol=1e-5)
    run(lambda s, x: ((1 - 0.9 ** s) * 3, x.sum() * 0.5), torch.rand(1) * 10, r(5), atol=1e-5)


@pytest.mark.parametrize("window", [(3, 2, 1, False), (2, 2, 0, True),
                                    ((3, 2), (2, 1), (1, 0), True)], ids=["3s2p1", "2s2ceil", "3x2"])
def test_max_pool_backward_from_window_offsets(window, monkeypatch):
    """Note [A max pool's backward from its offsets] (rewrite/pool_offsets.h): the pool's indices
    as int8 offsets and its backward as gathers from the windows, in generated kernels only (the
    integer floor divisions included)."""
    monkeypatch.setenv("EMBER_SPLIT_REDUCTIONS", "all")
    k, s, p, ceil = window
    aten = torch.ops.aten

    def fn(x, g):
        # Under grad mode, as in a training graph: under no_grad the indices are not rewritten.
        with torch.enable_grad():
            y, i = aten.max_pool2d_with_indices(x, k, s, p, 1, ceil)
            return y, aten.max_pool2d_with_indices_backward(g, x, k, s, p, 1, ceil, i)

    x = r(2, 3, 11, 13)
    y = aten.max_pool2d_with_indices(x, k, s, p, 1, ceil)[0]
    compiled = run(fn, x, r(*y.shape), atol=1e-5)
    externs = [st for st in compiled.describe_steps() if st.startswith("extern")]
    assert externs == ["extern aten::max_pool2d_with_indices"], compiled.describe_steps()


def test_max_pool_under_no_grad_is_a_generated_kernel(monkeypatch):
    """Inference: no backward can read the indices, so they are not rewritten as offsets, and the
    pool is a generated kernel, not ATen's (which writes int64 indices)."""
    monkeypatch.setenv("EMBER_SPLIT_REDUCTIONS", "all")

    def fn(x):
        with torch.no_grad():
            return torch.ops.aten.max_pool2d_with_indices(x, 3, 2, 1)[0].relu()

    compiled = run(fn, r(2, 3, 11, 13), atol=1e-6)
    assert not [st for st in compiled.describe_steps() if st.startswith("extern")], \
        compiled.describe_steps()


def test_triton_kernels_are_named_by_what_they_fuse():
    # ember_k<hash>_fused_<ops>: the name torch.profiler and nsys show for the kernel on the
    # device (issue 37, observability); its host range is the same name.
    compiled = run(lambda x, b: F.gelu(x + b) * 2, r(64, 96), r(96), kernels=1)
    kernel = [s for s in compiled.describe_steps() if s.startswith("kernel ")][0]
    name = kernel.split()[1].rstrip(":")
    assert name.startswith("ember_k") and name.endswith("_fused_add_gelu_mul"), kernel
    assert f"def {name}(" in compiled.kernel_sources[0]


@pytest.mark.parametrize("group_norm", [False, True])
def test_reductions_of_a_layout_copy_follow_the_buffer_read(group_norm):
    # Note [Reduction loops in the order of what the prologue reads]: the sums of a contiguous copy
    # of a channels-last tensor run in the channels-last buffer's order; the values are eager's.
    x = r(4, 8, 6, 6).to(memory_format=torch.channels_last)
    if group_norm:
        run(lambda x: F.group_norm(x * 2, 1), x)
    else:
        run(lambda x: (x + 1).contiguous().view(4, 8, 36).sum(-1), x, kernels=1)


@pytest.mark.parametrize("channels_last", [False, True])
def test_upsampling_fuses_into_triton_kernels(channels_last):
    # Nearest and bilinear resizes are index functions (src/sched/upsample.h): the f32 source
    # coordinates, their floors and weights computed in the kernel, against eager.
    torch.manual_seed(0)
    x = r(2, 3, 7, 9)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    run(lambda x: F.interpolate(x * 2, scale_factor=2, mode="nearest") + 1, x, kernels=1)
    # (Bilinear over NCHW rows stays an ATen call: one kernel either way.)
    run(lambda x: F.interpolate(x, size=(10, 13), mode="bilinear") * 3, x, kernels=1)
    run(lambda x: F.interpolate(x, scale_factor=1.5, mode="bilinear", align_corners=True) + 1, x,
        kernels=1)
    # bf16: eager's CPU kernel rounds differently from its CUDA one (a few ulps apart).
    run(lambda x: F.interpolate(x * 2 + 1, scale_factor=2, mode="bilinear"), x.to(torch.bfloat16),
        kernels=1, atol=3e-2, rtol=2e-2)
