"""runtime/causal_attention.h: attention whose mask is a constant causal mask (transformers'
decoders under compilation) runs with is_causal=True and no mask; its mask's nodes are gone.
Masks that are not exactly causal, or that depend on an input, stay."""

import pytest
import torch
import torch.nn.functional as F

import ember
import ember._C as C

B, H, S, D = 2, 4, 48, 16


def qkv(s=S, sk=S):
    torch.manual_seed(0)
    return [torch.randn(B, H, s, D), torch.randn(B, H, sk, D), torch.randn(B, H, sk, D)]


def compiled(fn, args):
    with torch.no_grad():
        c = C.CompiledGraph(ember.trace(fn, args))
        torch.testing.assert_close(c(*args)[0], fn(*args), atol=1e-5, rtol=1e-5)
    return c


def bool_causal(q, k, v):  # transformers' sdpa_mask: positions compared, and'ed with padding
    i = torch.arange(q.shape[2]) + 0
    j = torch.arange(k.shape[2]) + 0
    causal = (j[None, None, None, :] <= i[None, None, :, None])
    pad = torch.ones(B, k.shape[2], dtype=torch.bool)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=causal & pad[:, None, None, :])


def float_causal(q, k, v):  # the additive form, finfo.min above the diagonal
    i = torch.arange(S)
    m = torch.zeros(S, S).masked_fill(i[None, :] > i[:, None], torch.finfo(torch.float32).min)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m[None, None])


def test_constant_causal_masks_become_is_causal():
    for fn in (bool_causal, float_causal):
        c = compiled(fn, qkv())
        assert c.num_causal_attention == 1, fn.__name__
        # the mask's nodes (aranges, compare, and, where) are gone: one step is left
        assert c.describe_steps() == ["extern aten::_scaled_dot_product_flash_attention_for_cpu"]


def test_other_masks_stay():
    def shifted(q, k, v):  # the diagonal itself masked: not causal
        i = torch.arange(S)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=i[None, :] < i[:, None] + 0)

    def sliding(q, k, v):  # causal within a window of 8
        i = torch.arange(S)
        m = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - 8)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m)

    def per_batch(q, k, v):  # causal for one batch element only
        i = torch.arange(S)
        m = (i[None, :] <= i[:, None]).expand(B, 1, S, S).clone()
        m[1] = True
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m)

    def small_bias(q, k, v):  # -1 above the diagonal is a bias, not a mask
        i = torch.arange(S)
        m = torch.zeros(S, S).masked_fill(i[None, :] > i[:, None], -1.0)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m)

    for fn in (shifted, sliding, per_batch, small_bias):
        assert compiled(fn, qkv()).num_causal_attention == 0, fn.__name__

    def from_input(q, k, v, keep):  # the padding mask is the caller's: read on every call
        i = torch.arange(S)
        causal = i[None, None, None, :] <= i[None, None, :, None]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=causal & keep[:, None, None, :])

    keep = torch.ones(B, S, dtype=torch.bool)
    c = compiled(from_input, qkv() + [keep])
    assert c.num_causal_attention == 0
    keep[0, -5:] = False  # a later call's padding is honoured
    args = qkv() + [keep]
    with torch.no_grad():
        torch.testing.assert_close(c(*args)[0], from_input(*args), atol=1e-5, rtol=1e-5)

    def more_keys(q, k, v):  # 16 queries over 48 keys: is_causal would align the diagonal
        i = torch.arange(16) + 32  # top-left, the mask bottom-right
        j = torch.arange(S)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=j[None, :] <= i[:, None])

    assert compiled(more_keys, qkv(16, S)).num_causal_attention == 0


def test_decoder_models_run_causal_attention():
    pytest.importorskip("transformers")
    from ember.bench import models as M

    for name in ("OPTForCausalLM", "GPT2LMHeadModel"):
        w = M.select(only=[name])[0].build("small", "inference", "cpu", None)
        model = w.model.eval()
        ember.metrics.reset()
        with torch.no_grad():
            want = model(**w.kwargs).logits
            got = ember.compile(model)(**w.kwargs).logits
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        m = ember.metrics.snapshot()
        assert m["graphs"] == 1 and m["causal_attention"] == 2, (name, m)


def test_decoder_models_run_causal_attention_over_shape_symbols():
    # transformers 5 builds the mask from packed-sequence ids (a cumsum over the position ids):
    # proved causal at every length, one graph for all of them (OPT's of a padding mask of
    # ones too).
    pytest.importorskip("transformers")
    from ember.bench import models as M

    for name in ("OPTForCausalLM", "GPT2LMHeadModel"):
        w = M.select(only=[name])[0].build("small", "inference", "cpu", None)
        model = w.model.eval()
        ids = w.kwargs["input_ids"]
        ember.metrics.reset()
        cf = ember.compile(model, dynamic=True)
        with torch.no_grad():
            for T in (ids.shape[1], ids.shape[1] - 3, 5):
                kwargs = dict(w.kwargs, input_ids=ids[:, :T].contiguous())
                kwargs.pop("attention_mask", None)
                torch.testing.assert_close(cf(**kwargs).logits, model(**kwargs).logits,
                                           atol=1e-5, rtol=1e-5)
        m = ember.metrics.snapshot()
        assert m["graphs"] == 1 and m["dynamic_graphs"] == 1, (name, m, ember.metrics.fallback_reasons)
        assert m["causal_attention"] == 2, (name, m)


# Over shape symbols (Note [Causal masks over shape symbols]): the mask cannot be evaluated once
# for every length, so it is proved causal from its nodes (aranges, offsets, unsqueeze, slice,
# expand, a comparison, transformers' where(mask, 0, -inf) and its and with a padding of ones).

def hf_float_causal(q, k, v):  # transformers' sdpa path under compilation, offsets included
    past = 0
    i = torch.arange(q.shape[2]) + past
    j = torch.arange(k.shape[2]) + past
    allowed = (j[None, None, None, :] <= i[None, None, :, None]).expand(q.shape[0], -1, -1, -1)
    allowed = allowed & torch.ones(q.shape[0], k.shape[2], dtype=torch.bool)[:, None, None, :]
    m = torch.where(allowed, 0.0, float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m)


def symbolic_bool_causal(q, k, v):  # blocked above the diagonal, as a bool mask, written ">"
    i = torch.arange(q.shape[2])
    blocked = i[None, :] > i[:, None]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=~blocked)


def symbolic_shifted(q, k, v):  # the diagonal masked too: not causal
    i = torch.arange(q.shape[2])
    return F.scaled_dot_product_attention(q, k, v, attn_mask=i[None, :] < i[:, None])


def symbolic_offset(q, k, v):  # keys one past the query allowed: not causal
    i = torch.arange(q.shape[2])
    return F.scaled_dot_product_attention(q, k, v, attn_mask=i[None, :] <= i[:, None] + 1)


def symbolic_sliding(q, k, v):  # causal within a window of 4
    i = torch.arange(q.shape[2])
    m = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - 4)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m)


def symbolic_longer_keys(q, k, v):  # keys = 2 x queries, mask causal from the left: stays
    i = torch.arange(q.shape[2])
    j = torch.arange(k.shape[2])
    return F.scaled_dot_product_attention(q, k, v, attn_mask=j[None, :] <= i[:, None])


def padded_bias(q, k, v):  # CUDA's SDPA pads a bias to a multiple of 16, then slices it back
    i = torch.arange(q.shape[2])
    m = torch.where(i[None, :] <= i[:, None], 0.0, float("-inf"))
    n = m.shape[-1]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=F.pad(m, (0, (16 - n % 16) % 16))[..., :n])


def padded_at_the_start(q, k, v):  # a pad before the keys, sliced off: not read through (stays)
    i = torch.arange(q.shape[2])
    m = torch.where(i[None, :] <= i[:, None], 0.0, float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=F.pad(m, (1, 0))[..., 1:])


def _packed_ids(pos):  # transformers' find_packed_sequence_indices: a new id where a position
    first = pos[:, :1] - 1          # does not follow the one before
    diff = torch.cat([first, pos], dim=-1).diff(dim=-1)
    return (diff != 1).cumsum(-1)


def packed_sequence_causal(q, k, v):  # transformers 5's sdpa_mask under compilation
    b, L = q.shape[0], q.shape[2]
    pos = (torch.arange(L) + 0)[None, :].expand(b, -1)
    ids = _packed_ids(pos)
    bi = torch.arange(b)[:, None, None, None]
    qi = torch.arange(L)[None, None, :, None]
    ki = torch.arange(L)[None, None, None, :]
    allowed = torch.ones((), dtype=torch.bool) & (ki <= qi)
    allowed = allowed & (ids[bi, qi] == ids[bi, ki])
    return F.scaled_dot_product_attention(q, k, v, attn_mask=torch.where(allowed, 0.0, float("-inf")))


def packed_from_a_gap(q, k, v):  # positions with a gap: two sequences, not causal (stays)
    b, L = q.shape[0], q.shape[2]
    pos = (torch.arange(L) * 2)[None, :].expand(b, -1)
    ids = _packed_ids(pos)
    qi = torch.arange(L)[None, None, :, None]
    ki = torch.arange(L)[None, None, None, :]
    allowed = (ki <= qi) & (ids[:, None, :, None] == ids[:, None, None, :])
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)


def packed_read_past_the_end(q, k, v):  # one index reads past the ids (eager raises): stays
    b, L = q.shape[0], q.shape[2]
    ids = _packed_ids(torch.arange(L)[None, :].expand(b, -1))
    qi = torch.arange(L)[None, None, :, None]
    ki = torch.arange(L)[None, None, None, :]
    allowed = (ki <= qi) & (ids[0, qi] == ids[0, ki + 1])
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)


def test_a_packed_mask_read_past_its_end_raises_as_in_eager():
    def f(x):
        q, k, v = x.unbind(0)
        return packed_read_past_the_end(q, k, v)

    cf = ember.compile(f, dynamic=True)
    for s in (5, 9):
        x = torch.stack(qkv(s, s))
        with pytest.raises(IndexError):
            f(x)
        with pytest.raises(Exception, match="out of bounds|out of range"):
            cf(x)


@pytest.mark.parametrize("fn, rewritten", [
    (hf_float_causal, 1), (symbolic_bool_causal, 1), (padded_bias, 1), (packed_sequence_causal, 1),
    (packed_from_a_gap, 0), (symbolic_shifted, 0),
    (symbolic_offset, 0), (symbolic_sliding, 0), (symbolic_longer_keys, 0),
    (padded_at_the_start, 0)], ids=lambda x: getattr(x, "__name__", str(x)))
def test_masks_over_shape_symbols(fn, rewritten):
    # q, k and v from one input, so that their lengths are one symbol (as a model's are).
    def f(x):
        q, k, v = x.unbind(0)
        if fn is symbolic_longer_keys:
            k, v = torch.cat([k, k], 2), torch.cat([v, v], 2)
        return fn(q, k, v)

    ember.metrics.reset()
    cf = ember.compile(f, dynamic=True)
    with torch.no_grad():
        for s in (5, 16, 37):
            x = torch.stack(qkv(s, s))
            torch.testing.assert_close(cf(x), f(x), atol=1e-5, rtol=1e-5)
    snap = ember.metrics.snapshot()
    assert snap["graphs"] == 1 and snap["dynamic_graphs"] == 1, (snap, ember.metrics.fallback_reasons)
    assert snap["causal_attention"] == rewritten, snap


def test_ops_with_a_number_as_self_beside_a_mask():
    # pow.Scalar (2 ** x) has a number as `self`: the mask prover reads only tensors (MPT's
    # alibi slopes crashed it, an internal error).
    def f(q, k, v):
        i = torch.arange(S)
        slopes = 2 ** -torch.arange(1, H + 1, dtype=torch.float32)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=i[None, :] <= i[:, None]) * \
            slopes[None, :, None, None]

    assert compiled(f, qkv()).num_causal_attention == 1


def test_a_mask_the_prover_reads_is_not_run_at_compile_time():
    # transformers' masks (positions compared, and'ed with padding of ones; the additive form) are
    # proved causal: compiling runs none of their ops (on a GPU each would load an ATen kernel).
    for fn in (bool_causal, float_causal):
        args = qkv()
        traced = ember.trace(fn, args)
        with torch.no_grad(), torch.profiler.profile() as prof:
            c = C.CompiledGraph(traced)
        ran = {e.name for e in prof.events()}
        assert c.num_causal_attention == 1, fn.__name__
        assert not ran & {"aten::arange", "aten::le", "aten::gt", "aten::masked_fill", "aten::ones"}, (
            fn.__name__, sorted(ran))
        with torch.no_grad():
            torch.testing.assert_close(c(*args)[0], fn(*args), atol=1e-5, rtol=1e-5)
