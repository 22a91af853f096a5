"""The tracer's cache of meta-kernel results (src/tracer/meta_cache.h): hits give the same
metadata as the kernels, keys tell scalar values and types apart, view ops are not cached."""

from __future__ import annotations

import torch

import ember


def _run(fn, *args):
    return ember.compile(fn)(*args)


def test_cache_fills_and_hits_give_eager_results():
    ember._C.clear_meta_cache()
    assert ember._C.meta_cache_size() == 0

    def f(x):
        return torch.nn.functional.hardtanh(x * 2, 0.0, 6.0).sum(1)
    x = torch.randn(3, 5)
    torch.testing.assert_close(_run(f, x), f(x))
    filled = ember._C.meta_cache_size()
    assert filled > 0
    torch.testing.assert_close(_run(f, x), f(x))  # a new compile: every meta result a hit
    assert ember._C.meta_cache_size() == filled


def test_wrapped_scalars_of_other_types_and_values_are_other_keys():
    ember._C.clear_meta_cache()
    i = torch.arange(6, dtype=torch.int32).reshape(2, 3)
    for fn in (lambda t: t * 2, lambda t: t * 2.5, lambda t: t * 3, lambda t: t / 2):
        out = _run(fn, i)
        ref = fn(i)
        assert out.dtype == ref.dtype
        torch.testing.assert_close(out, ref)


def test_views_and_layouts_are_not_confused():
    ember._C.clear_meta_cache()

    def f(x):
        y = x.t().contiguous()
        return y.view(-1)[:4] + x.transpose(0, 1).reshape(-1)[:4]
    for shape in [(4, 6), (6, 4)]:
        x = torch.randn(*shape)
        out = _run(f, x)
        torch.testing.assert_close(out, f(x))
        assert out.stride() == f(x).stride()
