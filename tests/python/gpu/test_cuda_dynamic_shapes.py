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
