"""Stored prologues (Note [Stored prologues] in src/sched/fusion.cpp, on unless
EMBER_STORED_PROLOGUES=0): a residual add that its RMSNorm reads and a later op reads too is stored
by the norm's kernel, not by a kernel of its own. Differential against eager, C++ kernels and Triton's (interpreted), with
the kernel count as the assertion."""

from __future__ import annotations

import pytest
import torch

import ember._C as C
from ember.tracing import trace_with_structure


def rms(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def two_layers(h, a1, a2, w1, w2):
    h = h + a1
    h = h + rms(h, w1).relu() @ a2  # stored: the norm reads it, and the caller gets it
    return rms(h, w2), h


def compiled(monkeypatch, on, triton, args):
    monkeypatch.setenv("EMBER_STORED_PROLOGUES", "1" if on else "0")
    graph, unflatten = trace_with_structure(two_layers, args)
    return C.CompiledGraph(graph, triton_interpret=triton), unflatten


@pytest.mark.parametrize("triton", [False, True])
def test_the_residual_sum_is_stored_by_the_norms_kernel(monkeypatch, triton):
    if triton:
        pytest.importorskip("triton")
    torch.manual_seed(0)
    args = (torch.randn(6, 32), torch.randn(6, 32), torch.randn(32, 32) / 6, torch.randn(32),
            torch.randn(32))
    want = two_layers(*args)
    counts = {}
    for on in (False, True):
        g, unflatten = compiled(monkeypatch, on, triton, args)
        got = unflatten(g(*args))
        for x, y in zip(got, want):
            torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-5)
        counts[on] = g.num_kernels
    # The second add was a kernel of its own before its norm's kernel (the first one is cheap
    # enough to compute again in both of its readers, so it was never stored).
    assert counts[True] == counts[False] - 1, counts


def test_a_reader_between_the_add_and_the_norm_keeps_them_apart(monkeypatch):
    def f(h, a, w, m):
        s = h + a
        t = s @ m  # reads the sum before the norm does: the add's kernel must run first
        return rms(s, w) + t, s

    args = (torch.randn(4, 16), torch.randn(4, 16), torch.randn(16), torch.randn(16, 16))
    counts = {}
    for on in (False, True):
        monkeypatch.setenv("EMBER_STORED_PROLOGUES", "1" if on else "0")
        graph, unflatten = trace_with_structure(f, args)
        g = C.CompiledGraph(graph)
        for x, y in zip(unflatten(g(*args)), f(*args)):
            torch.testing.assert_close(x, y)
        counts[on] = g.num_kernels
    assert counts[True] == counts[False], counts


@pytest.mark.parametrize("env,kernels", [("0", 2), (None, 1)])  # None: the default, on
def test_a_residual_the_caller_gets_is_written_by_the_layer_norms_kernel(monkeypatch, env, kernels):
    def f(x, r):
        h = x + r
        return h, torch.nn.functional.layer_norm(h, (32,))

    if env is None:
        monkeypatch.delenv("EMBER_STORED_PROLOGUES", raising=False)
    else:
        monkeypatch.setenv("EMBER_STORED_PROLOGUES", env)
    args = (torch.randn(8, 32), torch.randn(8, 32))
    graph, unflatten = trace_with_structure(f, args)
    g = C.CompiledGraph(graph)
    for x, y in zip(unflatten(g(*args)), f(*args)):
        torch.testing.assert_close(x, y)
    assert g.num_kernels == kernels, g.describe_steps()
