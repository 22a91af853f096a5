"""Each graph pass of the pipeline (src/runtime/pipeline.h: causal_attention, fold_constants,
fuse_attention, bias_apart, hoist_collectives, sink_collective_waits), before and after, as graph text: a small program traced, then the pass run alone
on a copy (ember._C.run_graph_pass), against golden files
(tests/python/graph_passes/golden/<case>.{before,after}.txt; EMBER_ACCEPT_GOLDEN=1 rewrites them).
The CPU-only torch's text is the golden one (on a GPU machine only the counts are checked)."""

from __future__ import annotations

import os
import pathlib

import pytest
import torch
import torch.nn.functional as F

import ember
import ember._C as C

GOLDEN = pathlib.Path(__file__).parent / "golden"
CPU_ONLY = not torch.cuda.is_available()
B, H, S, D = 2, 3, 5, 4


def r(*shape, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape)), dtype=dtype)


def eager_attention(q, k, v, mask):  # TrOCR's: scale, a mask over [B, H, S, S], softmax, bmm
    w = torch.bmm(q, k.transpose(1, 2)) * 0.35
    w = (w.view(B, H, S, S) + mask).view(B * H, S, S)
    return torch.bmm(F.softmax(w, dim=-1), v)


def autocast_attention(q, k, v, mask):  # bf16 scores plus an f32 mask, the softmax cast back
    w = (torch.bmm(q, k.transpose(1, 2)).view(B, H, S, S) + mask).view(B * H, S, S)
    return torch.bmm(F.softmax(w, dim=-1).to(q.dtype), v)


def probabilities_read_twice(q, k, v):  # the probabilities are an output: nothing to fuse
    p = F.softmax(torch.bmm(q, k.transpose(1, 2)), dim=-1)
    return torch.bmm(p, v), p


def causal_sdpa(q, k, v):  # a constant causal mask, as transformers builds it under compile
    mask = torch.ones(S, S, dtype=torch.bool).tril()
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def constants(x):
    return x + torch.ones(3) * 2


def collective(x, w):  # what funcol.all_reduce traces to: the wait right after the collective
    s = torch.ops._c10d_functional.all_reduce(x.sum(0, keepdim=True), "sum", "0")
    s = torch.ops._c10d_functional.wait_tensor(s)
    return torch.softmax(x @ w, -1) * s


def late_collectives(x, w):  # two all-reduces written after work that does not feed them
    a = x.sum(0, keepdim=True)
    y = torch.softmax(x @ w, -1)
    b = y.amax(0, keepdim=True)
    z = torch.relu(y @ w)
    sa = torch.ops._c10d_functional.all_reduce(b, "max", "0")  # issued first in the program
    sb = torch.ops._c10d_functional.all_reduce(a, "sum", "0")  # its input is ready earliest
    sa = torch.ops._c10d_functional.wait_tensor(sa)
    sb = torch.ops._c10d_functional.wait_tensor(sb)
    return z * sa + sb


def linears(x, w1, b1, w2, b2, w3, b3):  # a GELU's product, a softmax's, a product returned
    h = torch.nn.functional.gelu(torch.nn.functional.linear(x, w1, b1))
    p = torch.softmax(torch.nn.functional.linear(h, w2, b2), -1)
    return p, torch.nn.functional.linear(h, w3, b3)


def layer_gathers(x, w0, x1, w1, x2, w2):  # each layer gathers its weight where it starts
    for w in (w0, w1, w2):
        g = torch.ops._c10d_functional.all_gather_into_tensor(w, 2, "0")
        g = torch.ops._c10d_functional.wait_tensor(g)
        x = torch.relu(x @ g[:8] + x1.sum() + x2.sum())
    return x


QKV = [r(B * H, S, D), r(B * H, S, D), r(B * H, S, D)]
CASES = {
    # case: (pass, program, arguments, how many it rewrites)
    "fuse_attention": ("fuse_attention", eager_attention, QKV + [r(B, 1, S, S)], 1),
    "fuse_attention_autocast": (
        "fuse_attention", autocast_attention,
        [t.to(torch.bfloat16) for t in QKV] + [r(B, 1, S, S)], 1),
    "fuse_attention_probabilities_read": ("fuse_attention", probabilities_read_twice, QKV, 0),
    "causal_attention": ("causal_attention", causal_sdpa, [r(1, H, S, D)] * 3, 1),
    # Only the GELU's product becomes mm and an add: the softmax (a reduction) and the graph's
    # output read the others.
    "bias_apart": ("bias_apart", linears, [r(4, 8), r(6, 8), r(6), r(5, 6), r(5), r(3, 6), r(3)],
                   1),
    "fold_constants": ("fold_constants", constants, [r(3)], 1),
    "sink_collective_waits": ("sink_collective_waits", collective, [r(6, 8), r(8, 8)], 1),
    # The first all-reduce goes right after its max, before the second product; the second,
    # whose input is ready first, waits for the first's result to be used (one in flight).
    "hoist_collectives": ("hoist_collectives", late_collectives, [r(6, 8), r(8, 8)], 1),
    "hoist_collectives_prefetch": ("hoist_collectives", layer_gathers, [r(4, 8), r(8, 8)] * 3,
                                   2),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_graph_pass_before_and_after(case):
    name, fn, args, count = CASES[case]
    with torch.no_grad():
        before = ember.trace(fn, args)
    after, changed = C.run_graph_pass(before, name)
    assert changed == count, str(after)
    if count == 0:
        assert str(after) == str(before)
    assert C.reprint_graph_text(str(after)) == str(after)  # the parser reads what a pass made
    if not CPU_ONLY:
        return
    for suffix, text in (("before", str(before)), ("after", str(after))):
        path = GOLDEN / f"{case}.{suffix}.txt"
        if os.environ.get("EMBER_ACCEPT_GOLDEN") == "1":
            path.write_text(text)
        assert text == path.read_text(), f"{path} differs:\n{text}"


def test_fused_attention_matches_eager():
    """The rewritten graph, compiled with kernels, computes what eager does (SDPA keeps the scores
    in f32: not bit-identical)."""
    args = QKV + [r(B, 1, S, S)]
    with torch.no_grad():
        graph = ember.trace(eager_attention, args)
        compiled = C.CompiledGraph(graph, fuse_attention=True)
        assert compiled.num_fused_attention == 1
        assert "fuse_attention" in [n for n, _ in compiled.step_seconds]
        assert compiled.describe_steps()[-1] == "extern ember::fused_attention"
        torch.testing.assert_close(compiled(*args)[0], eager_attention(*args))


def test_an_unknown_pass_is_a_user_error():
    graph = ember.trace(constants, [r(3)])
    with pytest.raises(ember.errors.CompileError, match="no graph pass named"):
        C.run_graph_pass(graph, "not_a_pass")


def test_a_collective_overlaps_the_work_that_does_not_need_its_result():
    # The program runs the matrix product between the all-reduce and its wait; the wait's result
    # is read by the last kernel only. A collective is never folded, though its input is constant.
    x, w = r(6, 8), r(8, 8)
    with torch.no_grad():
        steps = C.CompiledGraph(ember.trace(collective, [x, w])).describe_steps()
    names = [s.split(" [")[0] for s in steps]
    assert names.index("extern _c10d_functional::all_reduce") < names.index("extern aten::mm") \
        < names.index("extern _c10d_functional::wait_tensor"), steps

    def constant_input(w):
        s = torch.ops._c10d_functional.all_reduce(torch.ones(1, 8), "sum", "0")
        return w * torch.ops._c10d_functional.wait_tensor(s)

    with torch.no_grad():
        g = ember.trace(constant_input, [w])
    folded, _ = C.run_graph_pass(g, "fold_constants")
    assert "_c10d_functional::all_reduce" in str(folded) and "wait_tensor" in str(folded), folded


def test_collectives_keep_their_order_and_follow_their_inputs():
    # After hoist_collectives every collective still reads values made before it, and the
    # collectives' order (every rank issues them alike) is the program's.
    with torch.no_grad():
        g = ember.trace(late_collectives, [r(6, 8), r(8, 8)])
    after, moved = C.run_graph_pass(g, "hoist_collectives")
    assert moved == 1
    lines = [ln.strip() for ln in str(after).splitlines()]
    defined = set()
    order = []
    for ln in lines:
        if " = " not in ln:
            if ln.startswith("input "):
                defined.add(ln.split()[1])
            continue
        lhs, rhs = ln.split(" = ", 1)
        for tok in rhs.replace("(", " ").replace(")", " ").replace(",", " ").split():
            if tok.startswith("%"):
                assert tok in defined, (tok, ln, str(after))
        defined.add(lhs.split()[0])
        if "all_reduce" in rhs:
            order.append(rhs.split('"')[1])
    assert order == ["max", "sum"], str(after)
    names = [ln.split(" = ")[1].split("(")[0] for ln in lines if " = " in ln]
    assert names.index("_c10d_functional::all_reduce") < [
        i for i, n in enumerate(names) if n == "aten::mm"][1], str(after)
