"""The backend on CUDA tensors: tracer tensors report cuda:0, the executor runs ATen's CUDA kernels.
Skipped where no GPU is present (CI); run on the GPU machine."""

import copy
import os

import pytest
import torch
import torch.nn.functional as F

from ember.testing import check_model, recorded_compiled_functions

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def test_mlp_cuda():
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8))
    check_model(model.cuda().eval(), (torch.randn(4, 32, device="cuda"),), expect_graphs=1,
                expect_fallbacks=0)


def test_attention_bf16_cuda():
    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).sum(-1)

    args = [torch.randn(2, 4, 64, 32, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
    check_model(f, args, expect_graphs=1, expect_fallbacks=0)


@pytest.mark.parametrize("mask", [False, True])
def test_attention_uses_the_fused_kernel_eager_would(mask):
    import ember

    def f(q, k, v, m):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m if mask else None)

    q, k, v = (torch.randn(2, 4, 128, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    m = torch.randn(2, 1, 128, 128, device="cuda", dtype=torch.bfloat16)
    graph = ember.trace(f, (q, k, v, m))
    text = str(graph)
    # Not decomposed into matmuls and a softmax (the "math" choice the meta kernel would make).
    assert "softmax" not in text and "_scaled_dot_product_" in text, text
    check_model(f, (q, k, v, m), expect_graphs=1, expect_fallbacks=0)


def test_attention_with_a_row_mask_uses_the_fused_kernel():
    # transformers' mask for a bidirectional model with no padding under compilation: `q_idx >= 0`
    # expanded over the keys (last stride 0). CUDA's choice for it would be the math
    # decomposition; ember records where(row, attention without the mask, 0).
    import ember

    def f(q, k, v, rows):
        m = rows[None, None, :, None].expand(2, 1, 128, 128)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m)

    q, k, v = (torch.randn(2, 4, 128, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    rows = torch.rand(128, device="cuda") > 0.2
    text = str(ember.trace(f, (q, k, v, rows)))
    # The fused kernel eager picks without a mask (flash, or cuDNN's where it ranks first).
    assert "softmax" not in text and "_scaled_dot_product_" in text, text
    # Eager computes this mask's attention with the math decomposition, ember with a fused
    # kernel: bf16 results within a few ulps.
    check_model(f, (q, k, v, rows), expect_graphs=1, expect_fallbacks=0, atol=4e-3, rtol=2e-2)


@pytest.mark.parametrize("tf32", [True, False])
def test_f32_attention_with_a_row_mask_is_the_math_form_under_tf32(tf32):
    # Note [f32 attention on CUDA]: with TF32 products allowed, the math form (two bmm on the
    # tensor cores, a fused softmax) instead of the memory-efficient kernel; gradients too.
    import ember

    def f(q, k, v, rows):
        m = rows[None, None, :, None].expand(2, 1, 128, 128)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m)

    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        q, k, v = (torch.randn(2, 4, 128, 64, device="cuda", requires_grad=True) for _ in range(3))
        rows = torch.rand(128, device="cuda") > 0.2
        text = str(ember.trace(f, (q, k, v, rows)))
        assert ("aten::_safe_softmax" in text) == tf32, text
        assert ("_scaled_dot_product_" in text) != tf32, text
        tol = dict(atol=2e-2, rtol=2e-2) if tf32 else {}
        check_model(f, (q, k, v, rows), grad=True, expect_graphs=1, expect_fallbacks=0, **tol)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


@pytest.mark.parametrize("bias", [False, True])
def test_unaligned_matmul_is_padded_and_matches_eager(bias):
    # A language model's head (vocabulary 50257): traced as a product of zero-padded operands.
    import ember

    head = torch.nn.Linear(768, 50257, bias=bias).cuda().eval()

    def f(x):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return head(x)

    x = torch.randn(2, 512, 768, device="cuda")
    # The weight is a constant here (padded once, eagerly): the product's result is sliced, or,
    # at 64 MiB and more (these logits are 98 MiB), computed in row blocks into the unpadded
    # result (ember::matmul_sliced, Note [Padded products in row blocks]).
    ops = ember.trace(f, (x,)).ops
    assert "aten::slice.Tensor" in ops or "ember::matmul_sliced" in ops, ops
    check_model(f, (x,), expect_graphs=1, expect_fallbacks=0)
    # An unaligned inner dimension in f32.
    a, b = torch.randn(1024, 1001, device="cuda"), torch.randn(1001, 1536, device="cuda")
    check_model(lambda a, b: torch.relu(a @ b), (a, b), expect_graphs=1, expect_fallbacks=0)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_conv_net_runs_channels_last_and_matches_eager(dtype):
    # Convolutions are traced channels-last (src/rewrite/conv_layout.h); a depthwise one too; the
    # 4D output comes back contiguous, as eager's.
    import ember

    nn = torch.nn
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 32, 3, padding=1, groups=32), nn.BatchNorm2d(32), nn.Hardswish(),
        nn.MaxPool2d(2), nn.Conv2d(32, 64, 1)).cuda().eval()

    def f(x):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=dtype == "bf16"):
            return model(x)

    x = torch.randn(4, 3, 32, 32, device="cuda")
    text = str(ember.trace(f, (x,)))
    assert "memory_format=channels_last" in text, text
    # cuDNN's channels-last kernels accumulate in another order: bf16 results within a few ulps.
    tol = {"atol": 1e-2, "rtol": 2e-2} if dtype == "bf16" else {}
    check_model(f, (x,), expect_graphs=1, expect_fallbacks=0, **tol)
    with torch.no_grad():
        assert ember.compile(f)(x).is_contiguous()


def _grouped_conv_layouts(text):
    """(input strided, weight strided) per grouped convolution of a graph's text: whether each
    operand's type prints strides (channels-last here) or not (contiguous)."""
    import re

    types = dict(re.findall(r"(%\d+) : (\S+)", text))
    out = []
    for a, b, groups in re.findall(r"aten::convolution\((%\d+), (%\d+), .*, (\d+)\)", text):
        if int(groups) > 1:
            out.append(("{" in types[a], "{" in types[b]))
    return out


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_grouped_convolutions_take_the_layout_timed_faster(dtype):
    # A RegNet-style block: 1x1 convolution, grouped 3x3 (several channels per group), 1x1, then
    # a depthwise 9x9 (ConvMixer's). The grouped ones are timed on both layouts at the first
    # trace and recorded with both operands in the faster one (src/rewrite/conv_layout.h,
    # Note [Grouped convolutions by timing]): never a channels-last input with a contiguous
    # weight, which cuDNN converts per call.
    import ember

    nn = torch.nn
    model = nn.Sequential(
        nn.Conv2d(64, 464, 1), nn.BatchNorm2d(464), nn.ReLU(),
        nn.Conv2d(464, 464, 3, padding=1, groups=2), nn.BatchNorm2d(464), nn.ReLU(),
        nn.Conv2d(464, 128, 1), nn.ReLU(),
        nn.Conv2d(128, 128, 3, stride=2, padding=1, groups=16), nn.ReLU(),
        nn.Conv2d(128, 128, 9, padding=4, groups=128), nn.GELU()).cuda().eval()

    def f(x):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=dtype == "bf16"):
            return model(x)

    x = torch.randn(8, 64, 28, 28, device="cuda")
    with torch.no_grad():
        text = str(ember.trace(f, (x,)))
    layouts = _grouped_conv_layouts(text)
    assert len(layouts) == 3, text  # the depthwise one timed too
    # Timed, not taken channels-last by the rewrite row before it (as it was until session 65).
    from ember import _C

    timed = [t["key"] for t in _C.timed_convolutions()]
    for weight in ("464,232,3,3,", "128,8,3,3,", "128,1,9,9,"):
        assert any(f";{weight};" in k for k in timed), (weight, timed)
    assert all(a == b for a, b in layouts), (layouts, text)
    tol = {"atol": 1e-2, "rtol": 2e-2} if dtype == "bf16" else {"atol": 1e-4, "rtol": 1e-4}
    check_model(f, (x,), expect_graphs=1, expect_fallbacks=0, **tol)
    # Under grad mode the convolutions are left as they came (the backward was not timed).
    text = str(ember.trace(f, (x,)))
    assert "aten::convolution" in text


def test_reduce_overhead_replays_a_cuda_graph():
    # mode="reduce-overhead": the first call runs as usual, the second captures a CUDA graph,
    # every call from then on is one replay; outputs are copies, so a later call does not
    # overwrite what an earlier one returned.
    import ember
    from ember import _C

    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(),
                                torch.nn.LayerNorm(64), torch.nn.Linear(64, 8)).cuda().eval()
    compiled = ember.compile(model, mode="reduce-overhead")
    xs = [torch.randn(4, 32, device="cuda") for _ in range(5)]
    before = _C.cuda_graph_replays()
    with torch.no_grad():
        outs = [compiled(x) for x in xs]
        for x, o in zip(xs, outs):
            torch.testing.assert_close(o, model(x), rtol=1.3e-6, atol=1e-5)
    assert _C.cuda_graph_replays() - before == 4  # calls 2 to 5


def _conv_bn_net():
    layers = []
    for cin, cout in ((3, 8), (8, 8), (8, 16)):
        layers += [torch.nn.Conv2d(cin, cout, 3, padding=1), torch.nn.BatchNorm2d(cout),
                   torch.nn.ReLU()]
    net = torch.nn.Sequential(*layers).cuda().eval()
    for m in net:
        if isinstance(m, torch.nn.BatchNorm2d):  # statistics that are not the identity
            m.running_mean.uniform_(-1, 1)
            m.running_var.uniform_(0.5, 2)
    return net


def test_reduce_overhead_reads_module_state_in_place():
    # Parameters and registered buffers (batch-norm statistics) are read in place by a replay,
    # not copied into static inputs per call: what runs outside the replay is one input copy and
    # one output clone (a ResNet-50's 106 statistics copies cost more than its replay). An
    # in-place update of a buffer between calls is seen by the next replay.
    import ember
    from ember import _C

    net = _conv_bn_net()
    compiled = ember.compile(net, mode="reduce-overhead")
    x = torch.randn(2, 3, 16, 16, device="cuda")
    with torch.no_grad():
        for _ in range(3):
            compiled(x)
        torch.cuda.synchronize()
        before = _C.cuda_graph_replays()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in range(4):
                out = compiled(x)
            torch.cuda.synchronize()
        assert _C.cuda_graph_replays() - before == 4
        copies = sum(e.name == "aten::copy_" for e in prof.events())
        assert copies <= 2 * 4, f"{copies} copies in 4 replays: module state copied per call"
        # cuDNN's convolutions (TF32 by default) in another algorithm than eager's: 1e-3.
        torch.testing.assert_close(out, net(x), rtol=1e-3, atol=1e-3)
        net[1].running_mean.add_(0.5)
        net[4].weight.mul_(2)
        torch.testing.assert_close(compiled(x), net(x), rtol=1e-3, atol=1e-3)


def test_reduce_overhead_keeps_parameter_kernels_outside_the_replay():
    # Under autocast the weights' casts and the batch norms' per-channel terms are kernels of
    # parameters only: their cached outputs are read by the replay, which launches no kernel for
    # them (Note [Parameter kernels outside the replay]). An in-place update of a weight is seen:
    # that call runs the program, which writes the new casts where the graph reads them, and
    # replays go on without a new capture.
    import ember
    from ember import _C

    net = _conv_bn_net()

    def f(x):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return net(x)

    compiled = ember.compile(f, mode="reduce-overhead")
    x = torch.randn(2, 3, 16, 16, device="cuda")
    tol = {"rtol": 2e-2, "atol": 2e-2}
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]

    def device_kernels(calls):
        with torch.profiler.profile(activities=acts) as prof:
            for _ in range(calls):
                out = compiled(x)
            torch.cuda.synchronize()
        names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
                 and e.name.startswith("ember_k")]
        return out, names

    with torch.no_grad():
        for _ in range(3):
            compiled(x)
        before = _C.cuda_graph_replays()
        out, names = device_kernels(4)
        assert _C.cuda_graph_replays() - before == 4
        torch.testing.assert_close(out, f(x), **tol)
        # A replay launches what a call in the default mode launches once its parameter kernels
        # are cached: not the 3 weight casts and 3 batch-norm terms (before, every replay did).
        # (The default mode without its launch-bound convolution templates, which
        # reduce-overhead does not take: Note [Launch-bound products].)
        with ember.config.patch(launch_bound_products=0):
            default = ember.compile(f)
            default(x)
            with torch.profiler.profile(activities=acts) as prof:
                default(x)
                torch.cuda.synchronize()
        per_call = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
                    and e.name.startswith("ember_k")]
        assert len(names) == 4 * len(per_call), (names, per_call)
        net[0].weight.mul_(2)  # in place: the replay's cast of it is stale
        net[4].running_var.mul_(3)
        torch.testing.assert_close(compiled(x), f(x), **tol)
        for _ in range(3):
            torch.testing.assert_close(compiled(x), f(x), **tol)
        assert _C.cuda_graph_replays() - before == 4 + 3
        for _ in range(3):  # an optimizer's in-place steps between inference calls
            net[0].weight.add_(0.01)
            torch.testing.assert_close(compiled(x), f(x), **tol)
            torch.testing.assert_close(compiled(x), f(x), **tol)
        assert _C.cuda_graph_replays() - before == 4 + 3 + 3


def test_reduce_overhead_captures_again_when_module_state_moves():
    # A buffer reassigned to a new tensor (a new address the captured graph does not read) is
    # never read stale: the graph is captured again (or recompiled), and replays go on.
    import ember
    from ember import _C

    net = _conv_bn_net()
    compiled = ember.compile(net, mode="reduce-overhead")
    x = torch.randn(2, 3, 16, 16, device="cuda")
    with torch.no_grad():
        for _ in range(3):
            compiled(x)
        net[1].running_mean = net[1].running_mean + 0.25
        net[4].weight = torch.nn.Parameter(net[4].weight * 3)
        before = _C.cuda_graph_replays()
        for _ in range(3):
            torch.testing.assert_close(compiled(x), net(x), rtol=1e-3, atol=1e-3)
        assert _C.cuda_graph_replays() > before


def test_torch_compile_backend_ember_reduce_overhead_replays():
    # The mode reaches ember through torch.compile's entry point too (issue 37).
    from ember import _C

    net = _conv_bn_net()
    compiled = torch.compile(net, backend="ember", mode="reduce-overhead")
    x = torch.randn(2, 3, 16, 16, device="cuda")
    with torch.no_grad():
        compiled(x)
        before = _C.cuda_graph_replays()
        for _ in range(3):
            torch.testing.assert_close(compiled(x), net(x), rtol=1e-3, atol=1e-3)
    assert _C.cuda_graph_replays() - before >= 2


def test_triton_kernels_say_what_they_fuse_in_the_profiler():
    # On the device timeline a generated kernel is ember_k<hash>_fused_<ops>, and its launch's
    # host range has the same name (issue 37, observability).
    import ember

    def f(x):
        return torch.relu(x * 2) + 1

    compiled = ember.compile(f)
    x = torch.randn(4096, device="cuda")
    compiled(x)
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        compiled(x)
        torch.cuda.synchronize()
    device = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    fused = [n for n in device if n.startswith("ember_k") and "_fused_" in n]
    assert any("relu" in n and "mul" in n for n in fused), device
    host = {e.name for e in prof.events() if e.name.startswith("ember::")}
    assert {"ember::" + n for n in fused} <= host, (fused, host)


def test_reduce_overhead_captures_attention_without_dropout():
    # The fused attention ops are tagged nondeterministic_seeded (they take a dropout_p); with
    # dropout_p 0 they draw nothing, and the graph is captured (it was refused before: Bert and
    # GPT-2 ran without a CUDA graph).
    import ember
    from ember import _C

    def f(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True) * 2

    compiled = ember.compile(f, mode="reduce-overhead")
    q, k, v = (torch.randn(2, 4, 128, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    before = _C.cuda_graph_replays()
    for _ in range(3):
        torch.testing.assert_close(compiled(q, k, v), f(q, k, v))
    assert _C.cuda_graph_replays() - before == 2  # calls 2 and 3


def test_reduce_overhead_falls_back_where_a_graph_cannot_be_captured():
    # A graph that mutates its input runs without a CUDA graph (and says why), correctly.
    import ember
    from ember import _C

    def f(x):
        x.add_(1)
        return x * 2

    compiled = ember.compile(f, mode="reduce-overhead")
    before = _C.cuda_graph_replays()
    x = torch.zeros(8, device="cuda")
    for i in range(3):
        torch.testing.assert_close(compiled(x), torch.full((8,), 2.0 * (i + 1), device="cuda"))
    assert _C.cuda_graph_replays() == before


def test_factories_and_mutation_cuda():
    def f(x):
        z = torch.zeros(x.shape[0], 3, device=x.device)
        z[:, 0] = x[:, 0]
        x.mul_(2)
        return z + torch.arange(3, device=x.device), x[0]

    check_model(f, (torch.randn(5, 4, device="cuda"),), expect_graphs=1, expect_fallbacks=0)


def test_batchnorm_train_cuda():
    bn = torch.nn.BatchNorm2d(8).cuda().train()
    check_model(bn, (torch.randn(4, 8, 6, 6, device="cuda"),), expect_graphs=1, expect_fallbacks=0)


def test_autocast_cuda():
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU()).cuda().eval()

    def f(x):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return model(x)

    check_model(f, (torch.randn(4, 32, device="cuda"),), expect_fallbacks=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_split_group_norm_cuda(dtype):
    # ConvTasNet's global layer norm: 8 groups in all, 2M elements each, traced as two stages of
    # sums (src/rewrite/split_reduction.h); against eager, the mean and rstd outputs included.
    gn = torch.nn.GroupNorm(1, 512, eps=1e-8).cuda()
    with torch.no_grad():
        gn.weight.normal_()
        gn.bias.normal_()

    def f(x):
        out, mean, rstd = torch.ops.aten.native_group_norm(x, gn.weight.to(x.dtype),
                                                           gn.bias.to(x.dtype), 8, 512, 4001, 1,
                                                           1e-8)
        return torch.relu(out), mean, rstd, gn(x.float())

    x = torch.randn(8, 512, 4001, device="cuda", dtype=dtype) * 3 + 1
    tol = dict(atol=2e-2, rtol=2e-2) if dtype == torch.bfloat16 else dict(atol=1e-4, rtol=1e-4)
    check_model(f, (x,), expect_graphs=1, expect_fallbacks=0, **tol)


def test_autotuning_times_large_kernels_and_remembers_the_winner(tmp_path, monkeypatch):
    # A kernel over 4M elements has several launch configurations (codegen/triton_configs.h).
    # The first call compiles and launches its default only; the others compile in the background
    # (Note [Candidates compiled in the background], triton_runtime.cpp), and the first launch
    # after they are done times them and keeps the fastest, remembered under EMBER_CACHE_DIR, so
    # a second compile of the same kernel compiles the winner only and times nothing
    # (runtime/triton_tuning.h).
    import ember
    from ember import _C

    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("EMBER_TRITON_BACKGROUND_TUNING", "1")

    def f1(x, b):
        return F.gelu(x + b) * 2.5 - 0.375

    def f2(x, b):  # another code object, so another compile, of the same kernel
        return F.gelu(x + b) * 2.5 - 0.375

    x, b = torch.randn(4096, 1024, device="cuda"), torch.randn(1024, device="cuda")
    timed0, remembered0 = _C.triton_tuning_stats()
    queued0 = _C.background_compile_stats()[0]
    g1 = ember.compile(f1)
    torch.testing.assert_close(g1(x, b), f1(x, b))
    assert _C.triton_tuning_stats() == (timed0, remembered0)  # the default so far
    queued1 = _C.background_compile_stats()[0]
    assert queued1 >= queued0 + 2
    assert ember.finish_compiles(timeout_s=300)
    assert _C.background_compile_stats()[2] == 0
    torch.testing.assert_close(g1(x, b), f1(x, b))  # times the candidates, runs the winner
    timed1, remembered1 = _C.triton_tuning_stats()
    assert timed1 == timed0 + 1 and remembered1 == remembered0
    assert len(list((tmp_path / "triton" / "tune").glob("*.txt"))) == 1
    torch.testing.assert_close(g1(x, b), f1(x, b))
    torch.testing.assert_close(ember.compile(f2)(x, b), f2(x, b))
    assert _C.triton_tuning_stats() == (timed1, remembered1 + 1)
    assert _C.background_compile_stats()[0] == queued1  # nothing left to compile later


@pytest.mark.parametrize("how", ["option", "reduce-overhead"])
def test_autotuning_at_the_first_launch(tmp_path, monkeypatch, how):
    # Without background tuning, and under mode="reduce-overhead" (a CUDA graph captured at the
    # second call would keep the defaults), a large kernel compiles every candidate with the
    # graph and times them at its first launch; nothing goes to the background.
    import ember
    from ember import _C

    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("EMBER_TRITON_BACKGROUND_TUNING", "0" if how == "option" else "1")

    def f(x, b):
        return torch.sigmoid(x - b) * 1.25 + 0.5

    x, b = torch.randn(4096, 1024, device="cuda"), torch.randn(1024, device="cuda")
    timed0, _ = _C.triton_tuning_stats()
    queued0 = _C.background_compile_stats()[0]
    g = ember.compile(f, mode="reduce-overhead") if how == "reduce-overhead" else ember.compile(f)
    for _ in range(3):
        torch.testing.assert_close(g(x, b), f(x, b))
    assert _C.triton_tuning_stats()[0] == timed0 + 1
    assert _C.background_compile_stats()[0] == queued0


def test_background_compiles_end_with_the_process(tmp_path):
    # A process that exits while candidates compile in the background exits cleanly: the thread
    # is stopped at exit, before the compile pool and the interpreter go.
    import subprocess
    import sys

    code = (
        "import torch, ember\n"
        "from ember import _C\n"
        "f = ember.compile(lambda x: torch.tanh(x) * 3 + 1)\n"
        "x = torch.randn(4096, 2048, device='cuda')\n"
        "torch.testing.assert_close(f(x), torch.tanh(x) * 3 + 1)\n"
        "print('queued', _C.background_compile_stats()[0])\n"
    )
    env = dict(os.environ, EMBER_CACHE_DIR=str(tmp_path), EMBER_TRITON_BACKGROUND_TUNING="1")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "queued" in r.stdout and "queued 0" not in r.stdout, r.stdout


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_batch_norm_eval_as_affine_map_cuda(dtype):
    # Eval batch norm on CUDA traced as x * alpha[c] + beta[c] (src/rewrite/batch_norm_inference.h),
    # channels-last after a convolution and contiguous, against eager's cuDNN / ATen kernels.
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(8, 32, 3, padding=1), torch.nn.BatchNorm2d(32),
                                torch.nn.ReLU(), torch.nn.BatchNorm2d(32)).cuda().eval()
    with torch.no_grad():
        for m in model:
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.normal_()
                m.running_var.uniform_(0.5, 2.0)
                m.weight.normal_()
                m.bias.normal_()
    model = model.to(dtype)
    x = torch.randn(4, 8, 16, 16, device="cuda", dtype=dtype)
    tol = dict(atol=3e-2, rtol=3e-2) if dtype == torch.bfloat16 else dict(atol=2e-3, rtol=2e-3)
    with torch.no_grad():
        check_model(model, (x,), expect_graphs=1, expect_fallbacks=0, **tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_split_sum_mean_amax_cuda(dtype):
    # Reductions with few results over long rows run as partials, then their sum
    # (src/rewrite/split_reduction.h), against eager.
    def f(x):
        return x.sum(), x.mean((1, 2), keepdim=True), x.amax((1, 2)), x.sum((1, 2), dtype=torch.float32)

    x = torch.randn(4, 1024, 1024, device="cuda", dtype=dtype)
    tol = dict(atol=1e-1, rtol=1e-2) if dtype == torch.bfloat16 else dict(atol=1e-2, rtol=1e-4)
    check_model(f, (x,), expect_graphs=1, expect_fallbacks=0, **tol)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_convnext_block_bias_apart_and_row_tiles_cuda(dtype):
    # The depthwise convolution's bias is an add after it (src/rewrite/conv_bias.h), fused into
    # the layer norm over 96 channels, whose 16384 short rows run as row tiles of 16
    # (triton_codegen.md); the gelu between the linears is one collapsed loop.
    import ember
    import ember._C as C
    from blocks import ConvNeXtBlock

    model = ConvNeXtBlock(96).cuda().eval()

    def f(x):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=dtype == "bf16"):
            return model(x)

    x = torch.randn(16, 96, 32, 32, device="cuda")
    with torch.no_grad():
        graph = ember.trace(f, (x,))
    assert "aten::convolution(%" in str(graph) and ", None, [1, 1]" in str(graph), graph
    compiled = C.CompiledGraph(graph)
    assert list(compiled.refused_kernels) == [], compiled.refused_kernels
    assert any("native_layer_norm" in s and "convolution" not in s
               for s in compiled.describe_steps()), compiled.describe_steps()
    tol = {"atol": 3e-2, "rtol": 3e-2} if dtype == "bf16" else {"atol": 1e-4, "rtol": 1e-4}
    check_model(f, (x,), expect_graphs=1, expect_fallbacks=0, **tol)


def test_position_biased_attention_safe_softmax_cuda():
    # T5's attention on SDPA's math path: matmul, a bias add and _safe_softmax, which is one
    # kernel with the add before it (no ATen where/isneginf/all/softmax kernels); a fully masked
    # row is 0, as eager.
    import ember
    import ember._C as C

    def f(q, k, v, bias):
        s = torch.ops.aten._safe_softmax(q @ k.transpose(-1, -2) + bias, -1)
        return s @ v

    q, k, v = (torch.randn(2, 4, 128, 64, device="cuda") for _ in range(3))
    bias = torch.randn(1, 4, 128, 128, device="cuda")
    bias[..., 0, :] = -float("inf")
    compiled = C.CompiledGraph(ember.trace(f, (q, k, v, bias)))
    assert [s for s in compiled.describe_steps() if "_safe_softmax" in s][0].startswith("kernel")
    check_model(f, (q, k, v, bias), expect_graphs=1, expect_fallbacks=0, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_max_autotune_times_matmul_templates_against_cublas(dtype, tmp_path, monkeypatch):
    # mode="max-autotune": mm, addmm and bmm get the Triton template (runtime/matmul_template.h),
    # timed against cuBLAS at the first call; either way the results are eager's, and a second
    # graph of the same shapes takes the winner from disk.
    import ember
    import ember._C as C

    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    nn = torch.nn
    model = nn.Sequential(nn.Linear(512, 1024), nn.GELU(), nn.Linear(1024, 512)).cuda().to(dtype)

    def f(x, y):
        return model(x), torch.bmm(y, y.transpose(1, 2))

    x = torch.randn(256, 512, device="cuda", dtype=dtype)
    y = torch.randn(4, 128, 64, device="cuda", dtype=dtype)
    with torch.no_grad():
        graph = ember.trace(f, (x, y))
        compiled = C.CompiledGraph(graph, matmul_templates=True)
        assert compiled.num_matmul_templates == 3, compiled.describe_steps()
        tol = {"atol": 5e-2, "rtol": 5e-2} if dtype == torch.bfloat16 else {"atol": 1e-2,
                                                                             "rtol": 1e-2}
        for _ in range(2):
            got = compiled(x, y)
            want = f(x, y)
            for g, w in zip(got, want):
                torch.testing.assert_close(g, w, **tol)
        chosen = compiled.num_matmul_templates_chosen
        assert 0 <= chosen <= 3
        again = C.CompiledGraph(ember.trace(f, (x, y)), matmul_templates=True)
        got = again(x, y)
        assert again.num_matmul_templates_chosen == chosen
        for g, w in zip(got, f(x, y)):
            torch.testing.assert_close(g, w, **tol)
    check_model(f, (x, y), expect_graphs=1, expect_fallbacks=0, **tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_eager_attention_runs_as_one_sdpa_step_cuda(dtype):
    # runtime/attention_fusion.h: TrOCR's eager attention (bmm, + mask in 4D, softmax, bmm) and
    # LayoutLM's (4D matmuls over transposed heads, (1 - mask) * min) are one fused
    # scaled_dot_product_attention kernel each on CUDA graphs, never ATen's math fallback. SDPA
    # keeps the scores in f32 where eager rounds them to bf16: both are compared with an f64
    # reference, and the fused result must be as close as eager's.
    import ember
    import ember._C as C

    b, h, s, d = 4, 8, 256, 64

    def f(q, k, v, mask):
        w = (torch.bmm(q, k.transpose(1, 2)).view(b, h, s, s) + mask).view(b * h, s, s)
        return torch.bmm(F.softmax(w, dim=-1), v)

    def eager_4d(x, y, z, keep):
        q4, k4, v4 = (t.view(b, s, h, d).transpose(1, 2) for t in (x, y, z))
        w = torch.matmul(q4, k4.transpose(2, 3)) * d**-0.5
        w = w + (1.0 - keep) * torch.finfo(keep.dtype).min
        return torch.matmul(F.softmax(w, dim=-1), v4)

    def r(*shape):
        return torch.randn(*shape, device="cuda", dtype=dtype)

    mask = torch.zeros(b, 1, s, s, device="cuda", dtype=dtype).masked_fill(
        torch.ones(s, s, device="cuda").triu(1).bool(), torch.finfo(dtype).min)
    keep = torch.ones(b, 1, 1, s, device="cuda", dtype=dtype)
    keep[0, ..., -17:] = 0
    cases = [(f, (r(b * h, s, d) * d**-0.5, r(b * h, s, d), r(b * h, s, d), mask)),
             (eager_4d, (r(b, s, h * d), r(b, s, h * d), r(b, s, h * d), keep))]
    with torch.no_grad():
        for fn, args in cases:
            compiled = C.CompiledGraph(ember.trace(fn, args))
            assert compiled.num_fused_attention == 1, compiled.describe_steps()
            with torch.profiler.profile() as prof:
                got = compiled(*args)[0]
                torch.cuda.synchronize()
            ran = [e.name for e in prof.events() if "attention" in e.name]
            assert "aten::_scaled_dot_product_attention_math" not in ran, ran
            ref = fn(*[a.double() if a.dtype != torch.bool else a for a in args])
            # the f64 reference's mask value is f64's min, which no f32 or bf16 mask reaches
            err = (got.double() - ref).abs().max().item()
            eager_err = (fn(*args).double() - ref).abs().max().item()
            assert err <= 1.1 * eager_err + 1e-5, (fn.__name__, err, eager_err)


def test_training_on_cuda_matches_eager():
    # docs/design/autograd.md: the joint graph of a CUDA program (autograd runs its backward on
    # the engine's device thread, which records into the trace through the tracer tensors),
    # split by the min cut, both halves compiled to Triton kernels; gradients match eager's.
    import ember

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.LayerNorm(64),
                                torch.nn.Linear(64, 8)).cuda()
    check_model(model, (torch.randn(16, 32, device="cuda"),), grad=True, expect_graphs=1,
                expect_fallbacks=0, atol=1e-4, rtol=1e-4)
    assert ember.metrics.snapshot()["training_graphs"] == 1


def test_training_factory_ops_on_the_device_thread_cuda():
    # BERT's backward makes scalar_tensor / zeros / cat on autograd's CUDA device thread, which
    # inherits the trace's dispatch state but not its session (tracer/dispatch.cpp): before, the
    # joint trace failed and the graph ran eagerly.
    import ember

    def f(x, w):
        h = torch.where(x > 0, x @ w, torch.zeros((), device=x.device))
        return torch.cat([h, h.softmax(-1)], -1).masked_fill(x[:, :1] > 1, 0.5)

    x = torch.randn(8, 16, device="cuda")
    w = torch.randn(16, 16, device="cuda", requires_grad=True)
    check_model(f, (x, w), grad=True, expect_graphs=1, expect_fallbacks=0, atol=1e-4, rtol=1e-4)
    assert ember.metrics.snapshot()["training_graphs"] == 1


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_training_convnet_batch_norm_split_cuda(dtype):
    # Channels-last batch norm in training as split sums (rewrite/split_reduction.h), the
    # convolution bias gradients as split column sums; gradients and running statistics match
    # eager over two steps (bf16 under autocast, as the bench's training mode).
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.BatchNorm2d(32),
                                torch.nn.ReLU(), torch.nn.Conv2d(32, 32, 3, padding=1, groups=32),
                                torch.nn.BatchNorm2d(32), torch.nn.ReLU()).cuda().train()

    def f(x):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=dtype == "bf16"):
            return model(x).float()

    x = torch.randn(16, 3, 32, 32, device="cuda")
    tol = {"atol": 5e-2, "rtol": 5e-2} if dtype == "bf16" else {"atol": 1e-3, "rtol": 1e-3}
    check_model(f, (x,), grad=True, expect_graphs=1, expect_fallbacks=0, **tol)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_training_batch_norm_is_not_cudnn_and_backward_is_generated_cuda(dtype, monkeypatch):
    # rewrite/batch_norm_rewrite.h (EMBER_CUDNN_BATCH_NORM=0): f32 training batch norm on CUDA is
    # recorded as native_batch_norm (split into sums), not cudnn_batch_norm;
    # rewrite/decompose_backward.h (EMBER_DECOMPOSE_BACKWARD=all): its backward, the ReLU's and
    # the residual's are sums and pointwise ops in generated kernels.
    # Both off by default (Note [Batch-norm backward] in rewrite/decompose_backward.h).
    monkeypatch.setenv("EMBER_CUDNN_BATCH_NORM", "0")
    monkeypatch.setenv("EMBER_DECOMPOSE_BACKWARD", "all")
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(16, 16, 3, padding=1, bias=False)
    bn = torch.nn.BatchNorm2d(16)
    model = torch.nn.Sequential(conv, bn, torch.nn.ReLU()).cuda().train()

    def f(x):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=dtype == "bf16"):
            return (model(x) + x).float()

    x = torch.randn(32, 16, 32, 32, device="cuda")
    tol = {"atol": 5e-2, "rtol": 5e-2} if dtype == "bf16" else {"atol": 1e-3, "rtol": 1e-3}
    with recorded_compiled_functions() as made:
        check_model(f, (x,), grad=True, expect_graphs=1, expect_fallbacks=0, **tol)
    steps = " ".join(made[-1].forward_steps + made[-1].backward_steps)
    for op in ("cudnn_batch_norm", "native_batch_norm", "threshold_backward"):
        assert f"extern aten::{op}" not in steps, steps


def test_training_batch_norm_cudnn_statistics_ember_normalization_cuda(monkeypatch):
    # Note [cuDNN statistics, ember's normalization] (the default): cuDNN's
    # forward and backward stay, its output is ember's pointwise normalization, fused with the
    # ReLU, and the backward saves no batch-norm output (it recomputes it from x). Gradients and
    # running statistics match eager over two steps.
    monkeypatch.delenv("EMBER_CUDNN_BATCH_NORM", raising=False)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(16, 16, 3, padding=1, bias=False),
                                torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
                                torch.nn.Conv2d(16, 16, 1, bias=False), torch.nn.BatchNorm2d(16),
                                torch.nn.ReLU()).cuda().train()
    model = model.to(memory_format=torch.channels_last)
    x = torch.randn(32, 16, 32, 32, device="cuda").to(memory_format=torch.channels_last)
    with recorded_compiled_functions() as made:
        check_model(model, (x,), grad=True, expect_graphs=1, expect_fallbacks=0, atol=1e-3,
                    rtol=1e-3)
    f = made[-1]
    steps = " ".join(f.forward_steps + f.backward_steps)
    assert "extern aten::cudnn_batch_norm" in steps and "cudnn_batch_norm_backward" in steps, steps
    assert not any(op == "aten::cudnn_batch_norm" and kind.startswith("f32[32")
                   for op, kind, _ in f.saved_values), f.saved_values


def test_column_sum_split_cuda():
    # A linear layer's bias gradient (x.sum(0) of [8192, 768]) as partials, then their sum.
    def f(x, y):
        return x.sum(0), x.mean(0, keepdim=True), y.sum((0, 2, 3))

    x = torch.randn(8192, 768, device="cuda")
    y = torch.randn(64, 64, 28, 28, device="cuda").to(memory_format=torch.channels_last)
    check_model(f, (x, y), expect_graphs=1, expect_fallbacks=0, atol=1e-2, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_channels_last_global_pool_split_cuda(dtype):
    # Squeeze-and-excitation's mean over H x W of a channels-last activation (+ the conv's bias
    # before it): partials per sample, then their sum; and a prime number of rows, unsplit.
    def f(x, b, p):
        return (x + b).mean((2, 3), keepdim=True), x.sum((2, 3)), p.sum(1)

    x = torch.randn(8, 384, 32, 32, device="cuda", dtype=dtype).to(
        memory_format=torch.channels_last)
    b = torch.randn(1, 384, 1, 1, device="cuda", dtype=dtype)
    p = torch.randn(4, 1031, 64, device="cuda", dtype=dtype)
    tol = dict(atol=5e-2, rtol=2e-2) if dtype == torch.bfloat16 else dict(atol=1e-3, rtol=1e-4)
    check_model(f, (x, b, p), expect_graphs=1, expect_fallbacks=0, **tol)


def test_capture_path_training_cuda():
    # ember.compile with parameters requiring grad: a joint graph from the capture path.
    import ember

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(),
                                torch.nn.Linear(64, 8)).cuda()
    twin = copy.deepcopy(model)
    c = ember.compile(twin)
    x = torch.randn(16, 32, device="cuda")
    model(x).square().sum().backward()
    c(x).square().sum().backward()
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(q.grad, p.grad, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("masked", [False, True])
def test_training_attention_without_mask_gradient_cuda(masked):
    # fp32 SDPA on CUDA runs the memory-efficient kernel, whose backward takes attn_bias as a
    # (non-optional) Tensor: autograd passes an undefined one when there is no mask, recorded as
    # None. The extern call passed None and the kernel's unboxing raised "Expected Tensor but got
    # None" (BERT, DistilBERT and ViT training fell back in the first fp32 GPU run).
    import ember

    torch.manual_seed(0)
    q, k, v = (torch.randn(4, 8, 64, 32, device="cuda", requires_grad=True) for _ in range(3))
    mask = torch.randn(4, 1, 64, 64, device="cuda") if masked else None

    def f(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask).sin()

    check_model(f, (q, k, v), grad=True, expect_graphs=1, expect_fallbacks=0, atol=1e-4, rtol=1e-4)
    assert ember.metrics.snapshot()["training_graphs"] == 1


@pytest.mark.parametrize("name", ["SGD-momentum", "Adam", "AdamW-foreach"])
def test_training_optimizer_step_through_ember_compile_cuda(name):
    # ember.compile(opt.step) on CUDA: torch.optim's code inlined, its step count a 0-dim CPU
    # tensor beside the CUDA parameters (not capturable), the updates in-place mutations of the
    # graph's inputs (horizontally fused kernels). Parameters and state against eager's.
    import ember

    make = {"SGD-momentum": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=1e-2),
            "Adam": lambda ps: torch.optim.Adam(ps, lr=1e-2),
            "AdamW-foreach": lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1,
                                                          foreach=True)}[name]
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(),
                                torch.nn.Linear(64, 8)).cuda()
    twin = copy.deepcopy(model)
    opt, twin_opt = make(model.parameters()), make(twin.parameters())
    step = ember.compile(twin_opt.step)
    for i in range(4):
        torch.manual_seed(i)
        for p, q in zip(model.parameters(), twin.parameters()):
            p.grad = torch.randn_like(p)
            q.grad = p.grad.clone()
        opt.step()
        step()
        for p, q in zip(model.parameters(), twin.parameters()):
            torch.testing.assert_close(q, p, atol=1e-5, rtol=1e-5)
    for p, q in zip(model.parameters(), twin.parameters()):
        for key, value in opt.state[p].items():
            torch.testing.assert_close(twin_opt.state[q][key], value, atol=1e-5, rtol=1e-5)


def test_save_holds_the_triton_kernels(tmp_path):
    # ember.save finds a GPU graph's Triton cubins by their sources (issue 37, warm start).
    import zipfile

    import ember

    compiled = ember.compile(lambda x: torch.relu(x * 2) + 1)
    compiled(torch.randn(4096, device="cuda"))
    saved = ember.save(compiled, tmp_path / "a.zip")
    assert saved["triton"] >= 1, saved
    names = zipfile.ZipFile(tmp_path / "a.zip").namelist()
    assert any(n.startswith("triton/") and n.endswith(".cubin") for n in names), names


def test_a_graph_that_also_computes_on_the_cpu_gets_kernels():
    # An index made by torch.arange without a device (SAM's relative positions in timm) puts CPU
    # tensors in a CUDA graph: those nodes stay ATen calls, the rest still fuse (before: no kernel
    # at all, the whole graph ATen calls); no CUDA graph (a replay would skip the host's work).
    import ember
    import ember.metrics as em

    class RelPos(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.table = torch.nn.Parameter(torch.randn(2 * 14 - 1, 32))

        def forward(self, x):
            q = torch.arange(14, dtype=torch.float32)[:, None]
            k = torch.arange(14, dtype=torch.float32)[None, :]
            rel = self.table[(q - k + 13).long()]  # [14, 14, 32], indices on the CPU
            return torch.softmax(x @ rel.mean(-1) * 0.5 + x, -1).relu() * 2

    model = RelPos().cuda().eval()
    x = torch.randn(8, 14, 14, device="cuda")
    em.reset()
    with torch.no_grad():
        out = ember.compile(model)(x)
        ref = model(x)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    m = em.snapshot()
    assert m["graphs"] == 1 and m["kernels"] >= 1, m


def test_triton_intermediates_share_one_arena_on_the_device():
    # Note [An arena on the GPU]: a Triton graph's intermediates are slots of one device
    # allocation per call (not one empty_strided each); results are eager's across calls, with a
    # new input each call and with a CUDA graph replaying the program.
    import ember
    import ember._C as C

    def f(x, w):
        h = torch.softmax(x @ w, dim=-1) * 2
        g = torch.nn.functional.layer_norm(h + x, (256,))
        return torch.relu(g @ w.t()).sum(-1)

    w = torch.randn(256, 256, device="cuda") / 16
    with torch.no_grad():
        for cuda_graphs in (False, True):
            compiled = C.CompiledGraph(ember.trace(f, (torch.randn(64, 256, device="cuda"), w)),
                                       cuda_graphs=cuda_graphs)
            assert compiled.num_arena_buffers >= 1 and compiled.arena_bytes > 0, \
                compiled.describe_steps()
            for _ in range(4):
                x = torch.randn(64, 256, device="cuda")
                torch.testing.assert_close(compiled(x, w)[0], f(x, w), atol=1e-3, rtol=1e-3)


def test_no_device_arena_where_it_would_raise_the_peak():
    # Note [An arena on the GPU]: the softmaxes' outputs (kernel intermediates) die before the
    # products' operands are made; the two matrix products' results (extern) live together late.
    # With a block per buffer the call peaks at 64 MiB, with an arena (64 MiB of kernel slots)
    # plus the products' 32 MiB at 96: the graph keeps a block per output. At 32 rows the
    # difference is below the allocator's 2 MiB and the arena stays. (The same decision, forced
    # on for the CPU while writing it, gave 0 and 5 arena buffers.)
    import ember
    import ember._C as C

    def f(x, w1, w2):
        k1 = torch.softmax(x, -1)
        k2 = torch.softmax(x * 2, 0)
        r1 = (k1 * k2).sum(-1, keepdim=True)
        e1 = (x * r1) @ w1
        e2 = (x + r1) @ w2
        return (e1 * e2).sum(-1)

    with torch.no_grad():
        for rows, arena in ((1024, False), (32, True)):
            x = torch.randn(rows, 4096, device="cuda")
            w1, w2 = (torch.randn(4096, 4096, device="cuda") / 64 for _ in range(2))
            compiled = C.CompiledGraph(ember.trace(f, (x, w1, w2)))
            assert (compiled.num_arena_buffers > 0) == arena, compiled.describe_steps()
            torch.testing.assert_close(compiled(x, w1, w2)[0], f(x, w1, w2), atol=1e-2,
                                       rtol=1e-3)
