"""2D nearest and bilinear upsampling as index functions (src/sched/upsample.h): every mode, size
or scale, align_corners, up and down, layouts and dtypes against eager, fused with what makes and
reads the resized map (no ATen call left)."""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

import ember
import ember._C as C
from ember.testing import check_model

_RESIZES = {
    "nearest_x2": dict(scale_factor=2, mode="nearest"),
    "nearest_size": dict(size=(17, 20), mode="nearest"),
    "nearest_down": dict(scale_factor=0.5, mode="nearest"),
    "nearest_x1_5": dict(scale_factor=1.5, mode="nearest"),
    "bilinear_x2": dict(scale_factor=2, mode="bilinear", align_corners=False),
    "bilinear_corners": dict(size=(17, 20), mode="bilinear", align_corners=True),
    "bilinear_x1_5": dict(scale_factor=1.5, mode="bilinear"),
    "bilinear_down": dict(size=(5, 4), mode="bilinear"),
    "bilinear_one_row": dict(size=(1, 9), mode="bilinear", align_corners=True),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("name", list(_RESIZES))
def test_upsample_against_eager(name, channels_last, dtype):
    kw = _RESIZES[name]

    def f(x):
        return F.interpolate(torch.relu(x * 2 - 1), **kw) + 1

    torch.manual_seed(0)
    x = torch.randn(2, 5, 11, 13).to(dtype)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    tol = dict(atol=2e-2, rtol=2e-2) if dtype == torch.bfloat16 else dict(atol=1e-5, rtol=1e-5)
    # (Under the suite's dynamic run Dynamo breaks the graph at an integer scale_factor's resize:
    # two ember graphs, the resize eager between them.)
    graphs = None if os.environ.get("EMBER_TEST_DYNAMIC") == "1" else 1
    counters = check_model(f, (x,), expect_graphs=graphs, **tol)
    assert counters["fallbacks"] == 0


@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
def test_resizes_of_many_sizes_against_eager(mode):
    # Input and output sizes and scales that do not divide each other: the nearest rows must be
    # eager's f32 floor exactly (or the op stays ATen's), the bilinear weights close to eager's.
    torch.manual_seed(0)
    for h, w, scale in [(7, 9, 1.7), (13, 5, 2.5), (10, 10, 0.3), (3, 31, 3.0), (9, 6, 1.25)]:
        x = torch.randn(1, 3, h, w)
        fn = (lambda x: F.interpolate(x, scale_factor=scale, mode=mode))
        check_model(fn, (x,), expect_graphs=1, atol=1e-5, rtol=1e-5)
        size = (h * 2 + 1, max(1, w // 2 + 1))
        check_model(lambda x: F.interpolate(x, size=size, mode=mode), (x,), expect_graphs=1,
                    atol=1e-5, rtol=1e-5)


def test_upsample_fuses_with_its_producer_and_reader():
    x = torch.randn(2, 4, 8, 8)
    cl = x.to(memory_format=torch.channels_last)
    for mode, x_in in (("nearest", x), ("nearest", cl), ("bilinear", cl)):
        graph = ember.trace(lambda x: F.interpolate(x * 2 + 1, scale_factor=2, mode=mode) + x.sum(),
                            [x_in])
        compiled = C.CompiledGraph(graph)
        assert compiled.num_extern_steps == 0, (mode, compiled.describe_steps())
    # Bilinear over NCHW rows stays ATen's (the C++ kernels' per-column taps were scalar
    # gathers, twice eager's time).
    graph = ember.trace(lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), [x])
    assert graph.ops == ["aten::upsample_bilinear2d"]
    assert C.CompiledGraph(graph).num_extern_steps == 1
    # A feature pyramid's top-down step: upsample the coarse map and add the lateral one.
    coarse, lateral = torch.randn(2, 8, 6, 6), torch.randn(2, 8, 12, 12)
    graph = ember.trace(lambda c, l: F.interpolate(c, scale_factor=2, mode="nearest") + l,
                        [coarse, lateral])
    compiled = C.CompiledGraph(graph)
    assert compiled.num_kernels == 1 and compiled.num_extern_steps == 0, compiled.describe_steps()
