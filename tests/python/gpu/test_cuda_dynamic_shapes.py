"""Dynamic shapes on CUDA (issue 35): the GPT-2-style and BERT-style blocks of
tests/python/differential/test_diff_dynamic_shapes.py on cuda:0, through torch.compile's symbolic
graphs and ember.compile's automatic dynamic, equal to eager at every size. Skipped where no GPU
is present (CI); run on the GPU machine."""

import os
import sys

import pytest
import torch

import ember
from ember import metrics

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "differential"))
from test_diff_dynamic_shapes import BertLayer, GPT2Layer  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

SIZES = [(2, 16), (2, 17), (2, 31), (2, 64), (2, 100), (2, 128), (3, 17), (5, 17), (8, 17)]


def _inputs(model, B, T):
    x = torch.randn(B, T, 32, device="cuda")
    if model is BertLayer:
        mask = torch.ones(B, T, dtype=torch.long, device="cuda")
        mask[:, T // 2:] = 0
        return x, mask
    return (x,)


@pytest.mark.parametrize("model", [GPT2Layer, BertLayer], ids=["gpt2", "bert"])
@pytest.mark.parametrize("how", ["torch_compile_dynamic", "torch_compile_auto", "ember_auto"])
def test_blocks_at_many_sizes_on_cuda(model, how):
    torch.manual_seed(0)
    torch._dynamo.reset()
    metrics.reset()
    m = model().cuda().eval()
    if how == "ember_auto":
        c = ember.compile(m)
    else:
        c = torch.compile(m, backend="ember", dynamic=True if how == "torch_compile_dynamic" else None)
    with torch.no_grad():
        for B, T in SIZES:
            args = _inputs(model, B, T)
            torch.testing.assert_close(c(*args), m(*args), rtol=2e-3, atol=2e-3)
    snap = metrics.snapshot()
    assert snap["fallbacks"] == 0 and snap["eager_frames"] == 0, metrics.fallback_reasons
    assert snap["graphs"] <= 3, snap


def test_symbolic_graphs_compile_once_into_triton_kernels_over_the_symbols():
    # dynamic=True: one graph for every size, its pointwise kernels Triton kernels that take the
    # symbols as i64 arguments (no per-size program).
    torch.manual_seed(0)
    metrics.reset()
    m = GPT2Layer().cuda().eval()
    c = ember.compile(m, dynamic=True)
    with torch.no_grad():
        for B, T in SIZES:
            (x,) = _inputs(GPT2Layer, B, T)
            torch.testing.assert_close(c(x), m(x), rtol=2e-3, atol=2e-3)
    snap = metrics.snapshot()
    assert snap["graphs"] == 1 and snap["per_size_graphs"] == 0, snap
    assert snap["kernels"] >= 2, snap


def test_reduce_overhead_records_one_cuda_graph_per_size():
    # mode="reduce-overhead" with symbols: each size warms up, is captured on its second call,
    # and is replayed from then on; sizes do not share a graph.
    from ember import _C

    torch.manual_seed(0)
    m = GPT2Layer().cuda().eval()
    c = ember.compile(m, dynamic=True, mode="reduce-overhead")
    before = _C.cuda_graph_replays()
    with torch.no_grad():
        for T in (17, 31, 17, 31, 17, 31, 64):
            x = torch.randn(2, T, 32, device="cuda")
            torch.testing.assert_close(c(x), m(x), rtol=2e-3, atol=2e-3)
    # 17 and 31: call 1 warms up, calls 2 and 3 replay; 64 once (warm-up)
    assert _C.cuda_graph_replays() - before == 4


def test_reductions_over_symbols_are_triton_kernels_on_cuda():
    # Reduction kernels over shape symbols on the GPU: a scaled, causally masked softmax and a
    # layer norm with its residual, traced with symbolic rows and length, one Triton program for
    # every size, equal to eager far from the hints (docs/design/symbolic.md, "Reduction kernels").
    from ember import _C as C

    w, b = torch.randn(64, device="cuda"), torch.randn(64, device="cuda")

    def fn(x, y):
        T = x.shape[-1]
        mask = torch.ones(T, T, dtype=torch.bool, device="cuda").tril()
        att = (x * 0.125).masked_fill(~mask, float("-inf")).softmax(-1)
        h = y * 2 + 1
        return att, torch.nn.functional.layer_norm(h, (64,), w, b), h.sum(0)

    s = C.TraceSession()
    x = s.add_input(torch.randn(2, 9, 9, device="cuda"), "user", "x", None, [0, 1, 2])
    y = s.add_input(torch.randn(7, 64, device="cuda"), "user", "y", None, [0])
    with s, torch.no_grad():
        out = fn(x, y)
    cg = C.CompiledGraph(s.finish(list(out)))
    assert cg.symbolic_fallback == "" and cg.num_kernels >= 2, cg.refused_kernels
    for B, T, R in [(2, 2, 3), (3, 9, 7), (2, 130, 1000), (4, 512, 5000)]:
        args = (torch.randn(B, T, T, device="cuda"), torch.randn(R, 64, device="cuda"))
        for g, e in zip(cg(*args), fn(*args)):
            torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)
    assert cg.num_specializations == 0


def test_views_over_symbols_on_cuda():
    # Every view op over shape symbols read through by Triton kernels or made from its root
    # (tests/python/codegen/test_symbolic_views.py on the CPU): one graph, no ATen view call.
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "codegen"))
    from test_symbolic_views import every_view  # noqa: PLC0415

    torch.manual_seed(0)
    w = torch.randn(8, 5, device="cuda")
    metrics.reset()
    cf = ember.compile(every_view, dynamic=True)
    for B, T in [(2, 3), (2, 7), (3, 16), (5, 33), (4, 300)]:
        x = torch.randn(B, T, 8, device="cuda")
        for g, e in zip(cf(x, w), every_view(x, w)):
            assert g.shape == e.shape and g.stride() == e.stride()
            torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)
    snap = metrics.snapshot()
    assert snap["graphs"] == 1 and snap["dynamic_graphs"] == 1, (snap, metrics.fallback_reasons)
    assert snap["extern_steps"] == 2 and snap["codegen_notes"] == 0, (snap, metrics.fallback_reasons)


class _CausalAttention(torch.nn.Module):
    def __init__(self, C=64, H=4):
        super().__init__()
        self.H = H
        self.qkv = torch.nn.Linear(C, 3 * C)
        self.proj = torch.nn.Linear(C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


@pytest.mark.parametrize("train", [False, True], ids=["inference", "training"])
def test_flash_attention_runs_over_shape_symbols(train):
    # bf16 attention on CUDA is flash or cuDNN attention (aten::_scaled_dot_product_flash_attention,
    # _cudnn_attention), which return the query's and key's lengths as ints that their backward
    # takes: symbolic shape rules and symbolic ints keep one graph for every length (it compiled
    # per size before).
    torch.manual_seed(0)
    metrics.reset()
    m = _CausalAttention().cuda().to(torch.bfloat16).train(train)
    c = ember.compile(m, dynamic=True)
    for B, T in [(2, 16), (2, 17), (3, 100), (4, 255)]:  # (a size 1 would specialize, as Dynamo)
        x = torch.randn(B, T, 64, device="cuda", dtype=torch.bfloat16, requires_grad=train)
        with torch.set_grad_enabled(train):
            got, want = c(x), m(x)
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
        if train:
            got.float().square().mean().backward()
            g = [x.grad] + [p.grad for p in m.parameters()]
            x.grad = None
            m.zero_grad(set_to_none=True)
            want.float().square().mean().backward()
            for a, b in zip(g, [x.grad] + [p.grad for p in m.parameters()]):
                torch.testing.assert_close(a, b, rtol=3e-2, atol=3e-2)
            m.zero_grad(set_to_none=True)
    snap = metrics.snapshot()
    assert snap["graphs"] == 1 and snap["per_size_graphs"] == 0, (snap, metrics.fallback_reasons)
