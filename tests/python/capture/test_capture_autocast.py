"""torch.autocast inside a captured frame: the with block is entered for real, so the ops
traced inside see its casts (the graph holds the _to_copy nodes), and autocast is off again
after the block, after the capture and after a failed capture. Differential against eager,
with dtypes compared and frame counters asserted."""

from __future__ import annotations

import pytest
import torch

from capture_check import check

import ember


def r(*shape):
    return torch.randn(*shape)


def _autocast_off():
    return not torch.is_autocast_enabled("cpu")


def test_block_is_captured_with_its_casts():
    w = r(8, 8)

    def f(x):
        y = x + 1
        with torch.autocast("cpu", dtype=torch.bfloat16):
            z = y @ w
            q = z.relu()
        return q, q.float() * 2
    c = check(f, r(4, 8), atol=1e-2, rtol=1e-2)
    out = c(r(4, 8))
    assert out[0].dtype == torch.bfloat16 and out[1].dtype == torch.float32
    ops = ember.explain(f)(r(4, 8)).ops_per_graph[0]
    assert ops.count("aten::_to_copy") >= 2 and "aten::mm" in ops
    assert _autocast_off()


def test_parameters_read_inside_the_block_are_cast():
    """A module's weights become graph inputs when first read, inside the block: the tracer's
    exit and enter around the new input keep autocast on."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 8)
    conv = torch.nn.Conv2d(3, 4, 3)

    def f(x, img):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            a = lin(x)
            b = conv(img)
            with torch.autocast("cpu", enabled=False):
                c = a.float() @ a.float().t()
            d = torch.softmax(a, -1)
        return a, b, c, d, a + 1
    x, img = r(4, 8), r(1, 3, 8, 8)
    with torch.no_grad():
        ref = f(x, img)
        c = check(f, x, img, atol=1e-2, rtol=1e-2)
        out = c(x, img)
    assert [o.dtype for o in out] == [t.dtype for t in ref]
    assert [o.dtype for o in out] == [torch.bfloat16, torch.bfloat16, torch.float32,
                                      torch.bfloat16, torch.bfloat16]
    assert _autocast_off()


def test_region_with_autocast_off_runs_in_fp32_under_an_outer_autocast():
    """A rotary embedding's frequencies: an fp32 matmul inside `autocast(enabled=False)`, called
    with autocast on. The graph holds an fp32 bmm; the compiled graph's ATen calls must not be
    autocast again at run time (they were, to bf16: cos of positions up to 1023 was off by 2)."""
    inv = 1.0 / (10000 ** (torch.arange(0, 64, 2).float() / 64))

    def f(x, pos):
        a = inv[None, :, None].expand(x.shape[0], -1, 1)
        p = pos[:, None, :].float()
        with torch.autocast("cpu", enabled=False):
            fr = (a @ p).transpose(1, 2)
            emb = torch.cat((fr, fr), -1)
            cos = emb.cos()
        return cos.to(x.dtype), x @ x.transpose(1, 2)
    x, pos = r(1, 8, 8), torch.arange(1024)[None]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = f(x, pos)
        c = ember.compile(f)
        for _ in range(2):
            out = c(x, pos)
    assert out[0].dtype == torch.float32 and out[1].dtype == torch.bfloat16
    assert (out[0] - ref[0]).abs().max() < 1e-6
    torch.testing.assert_close(out[1], ref[1])


def test_outer_autocast_dtype_is_guarded():
    """Autocast on at call time is part of the guards, dtype included: a call under another
    dtype recompiles rather than reuse the bf16 graph."""
    w = r(8, 8)

    def f(x):
        return x @ w
    c = ember.compile(f)
    x = r(4, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert c(x).dtype == torch.bfloat16
    with torch.autocast("cpu", dtype=torch.float16):
        out = c(x)
        ref = f(x)
    assert out.dtype == ref.dtype == torch.float16
    assert c(x).dtype == torch.float32


def test_graph_break_inside_the_block_keeps_the_graphs_on_both_sides():
    def f(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = x @ x.t()
            print("inside")  # a graph break; the resume function enters the block again
            z = x @ y.float()  # cast to bfloat16 again: autocast is on in the resume function
        return z
    c = check(f, r(4, 4), captured=0, eager=1, reason="print", atol=1e-2, rtol=1e-2)
    assert c(r(4, 4)).dtype == torch.bfloat16 and _autocast_off()
    out = ember.explain(f)(r(4, 4))
    assert (out.graph_count, out.graph_break_count) == (2, 1)
    assert "aten::mm" in out.ops_per_graph[1] and "aten::_to_copy" in out.ops_per_graph[1]


class Boom(Exception):
    pass


def test_exception_inside_the_block_leaves_autocast_off():
    def f(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = x * 2
            if y.shape[0] == 3:
                raise Boom("three")
        return y
    c = ember.compile(f)
    for _ in range(2):
        with pytest.raises(Boom):
            c(r(3))
        assert _autocast_off()
    x = r(2)
    torch.testing.assert_close(c(x), f(x))
    assert _autocast_off()
