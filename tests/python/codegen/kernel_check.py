"""The check every codegen test makes: a function compiled by ember matches eager
(ember.testing.check_model, under no_grad), in `graphs` graphs with no fallback, every generated
kernel compiled, and, when given, `kernels` kernels and `externs` ATen calls (the counters)."""

import torch

from ember.testing import check_model


def run(fn, *args, kernels=None, externs=None, graphs=1, **kw):
    with torch.no_grad():
        stats = check_model(fn, args, expect_graphs=graphs, expect_fallbacks=0, **kw)
    assert stats.get("codegen_failures", 0) == 0, "a generated kernel failed to compile"
    if kernels is not None:
        assert stats["kernels"] == kernels, stats
    if externs is not None:
        assert stats["extern_steps"] == externs, stats
    return stats
