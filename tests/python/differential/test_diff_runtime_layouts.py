"""The executor's layout handling: view ops made directly from their input's storage (no
dispatcher call), and kernels whose input comes from an extern op with another layout than its
meta kernel promised (copied into the traced layout first)."""

from __future__ import annotations

import torch

from ember import _C
from ember.tracing import trace


def _compile(fn, args):
    return _C.CompiledGraph(trace(fn, args))


def test_views_of_inputs_alias_and_skip_the_dispatcher():
    def fn(x):
        return x.view(4, 8).t(), x[2:10], x.unsqueeze(0).expand(3, 32)

    x = torch.randn(32)
    g = _compile(fn, [x])
    assert g.num_view_steps >= 3
    outs = g(x)
    for got, want in zip(outs, fn(x)):
        assert got.shape == want.shape and got.stride() == want.stride()
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        assert got.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    # A view shares its input's version counter, as eager's views do.
    v0 = outs[0]._version
    x.add_(1)
    assert outs[0]._version == v0 + 1
    torch.testing.assert_close(outs[1], x[2:10], rtol=0, atol=0)


def test_view_of_an_input_with_a_storage_offset():
    def fn(x):
        return (x.view(2, 8)[:, 1:5] * 2, x.view(16)[3:7])

    big = torch.randn(40)
    g = _compile(fn, [torch.randn(16)])
    x = big[5:21]  # same sizes and strides as traced, another storage offset
    for got, want in zip(g(x), fn(x)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_view_of_an_input_with_other_strides_falls_back_to_the_dispatcher():
    def fn(x):
        return x.transpose(0, 1).unsqueeze(0) + 0

    g = _compile(fn, [torch.randn(3, 4)])
    x = torch.randn(4, 3).t()  # other strides: the graph runs its unfused copy
    torch.testing.assert_close(g(x)[0], fn(x), rtol=0, atol=0)


def test_split_views():
    def fn(x):
        a, b, c = x.split(4, dim=1)
        return a * 1, b.transpose(0, 1) + 1, c

    x = torch.randn(3, 12)
    g = _compile(fn, [x])
    assert g.num_view_steps >= 1
    for got, want in zip(g(x), fn(x)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        assert got.stride() == want.stride()


_lib = torch.library.Library("ember_test_layouts", "DEF")
_lib.define("colmajor(Tensor x) -> Tensor")


def _colmajor_cpu(x):
    # The real kernel returns a column-major result...
    return (x * 3).t().contiguous().t()


def _colmajor_meta(x):
    # ...while its meta kernel promises a contiguous one.
    return torch.empty_like(x, memory_format=torch.contiguous_format)


_lib.impl("colmajor", _colmajor_cpu, "CPU")
_lib.impl("colmajor", _colmajor_meta, "Meta")


def test_kernel_input_whose_real_layout_differs_from_its_meta_layout():
    def fn(x):
        return (torch.ops.ember_test_layouts.colmajor(x) + 1).relu()

    x = torch.randn(5, 7)
    g = _compile(fn, [x])
    assert g.num_kernels == 1
    torch.testing.assert_close(g(x)[0], fn(x), rtol=0, atol=0)


def test_constant_folding_of_factory_chains():
    # T5-style relative positions: a chain that depends on no input runs once, at compile time.
    def fn(x):
        q = torch.arange(8)
        rel = q.view(1, -1) - q.view(-1, 1)
        buckets = torch.where(rel.abs() < 3, rel.abs(), torch.full_like(rel, 3))
        return x + buckets.to(x.dtype), torch.zeros(2)  # the zeros output stays per call

    x = torch.randn(8, 8)
    g = _compile(fn, [x])
    assert g.num_folded_nodes >= 6
    assert not any("arange" in s or "where" in s for s in g.describe_steps())
    a, z = g(x)
    want_a, want_z = fn(x)
    torch.testing.assert_close(a, want_a, rtol=0, atol=0)
    torch.testing.assert_close(z, want_z, rtol=0, atol=0)
    z.add_(1)  # a caller may mutate an output: the next call still returns fresh zeros
    torch.testing.assert_close(g(x)[1], torch.zeros(2), rtol=0, atol=0)


def test_no_folding_of_random_ops_or_captured_tensors():
    w = torch.ones(4)

    def fn(x):
        return x + torch.rand(4) * 0, x * w

    g = _compile(fn, [torch.randn(4)])
    assert g.num_folded_nodes == 0
    w.add_(1)  # a captured tensor updated in place: the graph reads it anew
    x = torch.randn(4)
    torch.testing.assert_close(g(x)[1], x * 2)


def test_memory_planning_reuses_intermediate_kernel_outputs():
    def fn(x, w):
        a = (x * 2).sin() @ w          # kernel output 1 read by an extern
        b = (a + 1).cos() @ w          # kernel output 2, after 1 is dead: same arena bytes
        c = (b - 1).tanh() @ w         # kernel output 3
        return (c * 3).relu(), (a * 0.5).t()  # the outputs get their own memory

    torch.manual_seed(0)
    x, w = torch.randn(16, 16), torch.randn(16, 16)
    g = _compile(fn, [x, w])
    # Three intermediate kernel outputs: in the arena, or written into the dead matmul result
    # they are computed from (b - 1).tanh() and (c * 3).relu() can be).
    assert g.num_arena_buffers + g.num_reused_buffers >= 3
    assert g.arena_bytes <= 2 * 16 * 16 * 4  # (x*2).sin() is dead once (a+1).cos() is written
    for _ in range(2):  # a second call reuses nothing from the first
        outs = g(x, w)
        for got, want in zip(outs, fn(x, w)):
            # Three matmuls through sin/cos/tanh: a last-bit difference in one grows to ~1e-5.
            torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-5)


def test_memory_planning_keeps_buffers_aliased_by_outputs_apart():
    def fn(x, w):
        a = x.exp()              # viewed by an output: not in the arena
        b = (x + 1).sin() @ w    # in the arena
        return a.view(-1)[:8], (b * 2).relu()

    x, w = torch.randn(4, 4), torch.randn(4, 4)
    g = _compile(fn, [x, w])
    assert g.num_arena_buffers == 1
    outs = g(x, w)
    for got, want in zip(outs, fn(x, w)):
        torch.testing.assert_close(got, want)


_lib.define("sneaky_view(Tensor x) -> Tensor")
# The real kernel returns a view of its input although its schema promises a new tensor.
_lib.impl("sneaky_view", lambda x: x.view(-1), "CPU")
_lib.impl("sneaky_view", lambda x: torch.empty(x.numel(), dtype=x.dtype, device="meta"), "Meta")


def test_memory_planning_with_views_the_schema_does_not_announce():
    def fn(x, w):
        a = (x * 2).sin()
        v = torch.ops.ember_test_layouts.sneaky_view(a)   # aliases a's arena bytes
        u = torch.ops.aten._unsafe_view((x + 1).cos(), [-1])  # a view, unannotated in ATen
        b = ((x - 1).tanh() @ w).exp()                    # may reuse a's bytes
        return v * 1 + u, b

    x, w = torch.randn(8, 8), torch.randn(8, 8)
    g = _compile(fn, [x, w])
    assert g.num_arena_buffers >= 2
    for got, want in zip(g(x, w), fn(x, w)):
        torch.testing.assert_close(got, want)


def test_dead_extern_results_are_written_in_place():
    def fn(x, w, b):
        return torch.nn.functional.gelu(x @ w + b)  # the kernel writes into mm's dead result

    x, w, b = torch.randn(8, 16), torch.randn(16, 32), torch.randn(32)
    g = _compile(fn, [x, w, b])
    assert g.num_reused_buffers == 1
    for _ in range(2):
        torch.testing.assert_close(g(x, w, b)[0], fn(x, w, b))


def test_inputs_still_needed_are_not_written_in_place():
    def fn(x, w):
        m = x @ w
        # m is read at two indices (m[i, j] and m[j, i]); x is the caller's.
        return (m * 2).relu(), m.t() * 3, x.sin() + 1

    x, w = torch.randn(8, 8), torch.randn(8, 8)
    g = _compile(fn, [x, w])
    assert g.num_reused_buffers == 0
    for got, want in zip(g(x, w), fn(x, w)):
        torch.testing.assert_close(got, want)
    m = x @ w  # an output of the graph is never overwritten
    g2 = _compile(lambda x, w: ((x @ w).cos(), x @ w), [x, w])
    outs = g2(x, w)
    torch.testing.assert_close(outs[1], m)


def test_in_place_only_when_nothing_else_holds_the_memory():
    def fn(x, w):
        m = x @ w
        v = torch.ops.ember_test_layouts.sneaky_view(m)  # shares m's memory, unannounced
        return (v * 2).relu(), m + 1  # m is alive after the kernel that may overwrite v

    x, w = torch.randn(8, 8), torch.randn(8, 8)
    g = _compile(fn, [x, w])
    for _ in range(2):
        for got, want in zip(g(x, w), fn(x, w)):
            torch.testing.assert_close(got, want)


def test_constant_folding_of_metadata_only_ops():
    # Longformer-style masks: full_like / new_ones of an input, then tril and masked_fill, depend
    # on the input's shape only.
    def fn(x):
        mask = x.new_ones(x.shape[-2:]).tril().flip(0)
        fill = torch.full_like(x, 2.0).masked_fill(mask.bool(), -1.0)
        return x * fill

    x = torch.randn(3, 5, 5)
    g = _compile(fn, [x])
    assert g.num_folded_nodes >= 5
    assert g.describe_steps() and all("new_ones" not in s and "full_like" not in s
                                      for s in g.describe_steps())
    torch.testing.assert_close(g(x)[0], fn(x), rtol=0, atol=0)


def test_mutations_are_written_into_their_input():
    # Note [Mutations written in place] (runtime/executor_memory.cpp): an optimizer-like update
    # is computed into the parameter directly, with no copy at the end; autograd's version
    # counter still moves, as copy_ would move it.
    def fn(p, m, g):
        m.mul_(0.9).add_(g)
        p.sub_(m * 0.1)
        return g * 2

    p, m, g = torch.randn(64, 32), torch.randn(64, 32), torch.randn(64, 32)
    gr = _compile(fn, [p, m, g])
    assert gr.num_written_through == 2, gr.num_written_through
    p_ref, m_ref = p.clone(), m.clone()
    for _ in range(3):
        version = p._version
        fn(p_ref, m_ref, g)
        gr(p, m, g)
        torch.testing.assert_close(p, p_ref)
        torch.testing.assert_close(m, m_ref)
        assert p._version > version


def test_mutated_inputs_read_later_or_shared_are_copied():
    # p is read after the product, which reads p's new value: the scheduler computes the new
    # value again in that last kernel, which may then write it into p (nothing reads p after it).
    def fn(p, w, g):
        t = p + g
        y = t @ w + p
        p.copy_(t)
        return y

    p, w, g = torch.randn(16, 16), torch.randn(16, 16), torch.randn(16, 16)
    gr = _compile(fn, [p, w, g])
    p_ref = p.clone()
    want = fn(p_ref, w, g)
    (got,) = gr(p, w, g)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(p, p_ref)

    # The same tensor as two inputs: the kernel may not write into it while the other is read.
    def update(p, q):
        p.add_(q * 2)
        return q + 1

    x = torch.randn(32)
    gr = _compile(update, [x, torch.randn(32)])
    assert gr.num_written_through == 1
    want = x.clone()
    update(want, want.clone())
    gr(x, x)
    torch.testing.assert_close(x, want)
