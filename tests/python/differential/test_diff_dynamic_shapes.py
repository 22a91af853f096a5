"""Dynamic shapes through torch.compile(backend="ember") (issue 35): the graphs Dynamo makes with
symbolic sizes (automatic dynamic after a size changes, or dynamic=True) are compiled by ember with
shape symbols, not run eagerly, and match eager at every size."""

import gc

import pytest
import torch
import torch.nn.functional as F

import ember
from ember import metrics

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(autouse=True)
def _free_compiled_functions():
    # Compiled functions (and their capture records) die with the cycles that hold them: collect
    # them, so that tests counting the live compilers' records after these see none of them.
    yield
    gc.collect()


class GPT2Layer(torch.nn.Module):
    """A GPT-2 style block: pre-norm causal self-attention with a mask sliced to the length, and a
    GELU MLP."""

    def __init__(self, C=32, H=4, max_len=512):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(C), torch.nn.LayerNorm(C)
        self.qkv, self.proj = torch.nn.Linear(C, 3 * C), torch.nn.Linear(C, C)
        self.fc, self.out = torch.nn.Linear(C, 4 * C), torch.nn.Linear(4 * C, C)
        self.H = H
        self.register_buffer("bias", torch.tril(torch.ones(max_len, max_len, dtype=torch.bool)))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / (C // self.H) ** 0.5)
        att = att.masked_fill(~self.bias[:T, :T], float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class BertLayer(torch.nn.Module):
    """A BERT style layer: post-norm bidirectional attention under a padding mask (a second input
    whose sizes are the first's), then a GELU MLP."""

    def __init__(self, C=32, H=4):
        super().__init__()
        self.q, self.k, self.v = (torch.nn.Linear(C, C) for _ in range(3))
        self.o, self.ln1, self.ln2 = torch.nn.Linear(C, C), torch.nn.LayerNorm(C), torch.nn.LayerNorm(C)
        self.fc, self.out = torch.nn.Linear(C, 4 * C), torch.nn.Linear(4 * C, C)
        self.H = H

    def forward(self, x, mask):
        B, T, C = x.shape
        heads = lambda t: t.view(B, T, self.H, C // self.H).permute(0, 2, 1, 3)
        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        scores = q @ k.transpose(-1, -2) / (C // self.H) ** 0.5
        scores = scores + (1.0 - mask[:, None, None, :].to(x.dtype)) * -10000.0
        y = (scores.softmax(-1) @ v).permute(0, 2, 1, 3).reshape(B, T, C)
        x = self.ln1(x + self.o(y))
        return self.ln2(x + self.out(F.gelu(self.fc(x))))


SEQ_LENS = [16, 17, 31, 64, 100, 128]
BATCHES = [2, 3, 5, 8]


def _calls(model, make_inputs, compiled):
    with torch.no_grad():
        for B, T in [(2, t) for t in SEQ_LENS] + [(b, 17) for b in BATCHES]:
            args = make_inputs(B, T)
            torch.testing.assert_close(compiled(*args), model(*args), rtol=1e-4, atol=1e-4)


def _gpt2_inputs(B, T):
    return (torch.randn(B, T, 32),)


def _bert_inputs(B, T):
    mask = torch.ones(B, T, dtype=torch.long)
    mask[:, T // 2:] = 0
    return torch.randn(B, T, 32), mask


@pytest.mark.parametrize("model,make_inputs", [(GPT2Layer, _gpt2_inputs), (BertLayer, _bert_inputs)],
                         ids=["gpt2", "bert"])
@pytest.mark.parametrize("dynamic", [None, True], ids=["automatic", "dynamic_true"])
def test_sequence_lengths_and_batch_sizes_compile_at_most_twice(model, make_inputs, dynamic):
    torch.manual_seed(0)
    torch._dynamo.reset()
    metrics.reset()
    m = model().eval()
    _calls(m, make_inputs, torch.compile(m, backend="ember", dynamic=dynamic))
    snap = metrics.snapshot()
    assert snap["fallbacks"] == 0, metrics.fallback_reasons
    # dynamic=True: one graph, symbolic from the first call. Automatic dynamic is Dynamo's: the
    # first graph is static, and each dim seen changing makes one more graph with it symbolic (the
    # lengths change first, the batch later: static, then [2, s], then [s, s]).
    if dynamic:
        assert snap["graphs"] == 1 and snap["dynamic_graphs"] == 1, snap
    else:
        assert snap["graphs"] == 3 and snap["dynamic_graphs"] == 2, snap
    assert snap["size_guard_failures"] == 0, snap


def test_a_slice_past_a_symbolic_length_stays_right():
    # x[:, :3] on a symbolic length: ember's slice decides 3 < T at the hints (a size guard). A
    # call with T <= 3 must not read past the end: either Dynamo guarded the same relation and
    # recompiled, or ember's size guard fails for that call and it runs eagerly (counted).
    torch._dynamo.reset()
    metrics.reset()

    def f(x):
        return x[:, :3] * 2

    cf = torch.compile(f, backend="ember", dynamic=True)
    for T in [8, 9, 2]:
        x = torch.randn(2, T)
        torch.testing.assert_close(cf(x), f(x))
    snap = metrics.snapshot()
    assert snap["dynamic_graphs"] >= 2 or snap["size_guard_failures"] >= 1, snap


def test_an_int_input_that_is_no_size_is_compiled_per_value():
    # Dynamo makes a changing int argument a SymInt input; it is no tensor's size, so ember
    # compiles the graph with static shapes once per value (never eagerly).
    torch._dynamo.reset()
    metrics.reset()

    def f(x, n):
        return x * n + 1

    cf = torch.compile(f, backend="ember")
    for n in [2, 3, 4, 3]:
        x = torch.randn(3)
        torch.testing.assert_close(cf(x, n), f(x, n))
    snap = metrics.snapshot()
    assert snap["fallbacks"] == 0 and snap["per_size_graphs"] == 1, (snap, metrics.fallback_reasons)
    # The static graph of n = 2, then Dynamo's symbolic graph compiled for n = 3 and n = 4 (the
    # second n = 3 reuses its graph).
    assert snap["graphs"] == 3, snap


# ---- ember.compile's own capture (src/capture): the frame compiler makes dims symbolic.


@pytest.mark.parametrize("model,make_inputs", [(GPT2Layer, _gpt2_inputs), (BertLayer, _bert_inputs)],
                         ids=["gpt2", "bert"])
def test_ember_compile_automatic_dynamic(model, make_inputs):
    # As Dynamo's automatic dynamic: static first; a recompile after the length changed makes the
    # length symbolic, one after the batch changed the batch too. Then every size runs.
    torch.manual_seed(0)
    metrics.reset()
    m = model().eval()
    with ember.config.patch(dynamic="automatic"):  # also under the suite's EMBER_DYNAMIC=true
        cf = ember.compile(m)
    _calls(m, make_inputs, cf)
    snap = metrics.snapshot()
    assert snap["eager_frames"] == 0 and snap["graph_breaks"] == 0, metrics.fallback_reasons
    assert snap["graphs"] == 3, snap


def test_ember_compile_dynamic_true_compiles_once_for_every_size():
    metrics.reset()

    def f(x, b):
        B, T, C = x.shape
        y = (x + b).view(B * T, C).softmax(-1)
        return y.view(B, T, C).sum(1), torch.arange(T)

    cf = ember.compile(f, dynamic=True)
    b = torch.randn(16)
    for B, T in [(2, 5), (2, 7), (3, 9), (4, 33), (8, 100)]:
        x = torch.randn(B, T, 16)
        torch.testing.assert_close(cf(x, b), f(x, b))
    snap = metrics.snapshot()
    assert snap["graphs"] == 1 and snap["eager_frames"] == 0, (snap, metrics.fallback_reasons)
    out = ember.explain(f, dynamic=True)(torch.randn(2, 5, 16), b)
    assert "sizes=[-1, -1, -1] (-1: any size >= 2)" in out.guards[0]


def test_ember_compile_dynamic_false_and_mark_dynamic():
    def f(x):
        return x.softmax(-1) * 2

    metrics.reset()
    cf = ember.compile(f, dynamic=False)
    for T in [5, 6, 7]:
        x = torch.randn(2, T)
        torch.testing.assert_close(cf(x), f(x))
    assert metrics.snapshot()["graphs"] == 3

    metrics.reset()
    cf = ember.compile(f)
    for T in [5, 6, 7]:
        x = torch.randn(2, T)
        torch._dynamo.mark_dynamic(x, 1)
        torch.testing.assert_close(cf(x), f(x))
    assert metrics.snapshot()["graphs"] == 1


def test_ember_compile_size_relations_are_guards():
    # x[:, :3] decided 3 < T at the traced size: T = 2 fails that guard and recompiles, right.
    metrics.reset()

    def f(x):
        return x[:, :3] * 2

    cf = ember.compile(f, dynamic=True)
    for T in [8, 9, 2]:
        x = torch.randn(2, T)
        torch.testing.assert_close(cf(x), f(x))
    assert metrics.snapshot()["graphs"] == 2
    out = ember.explain(f, dynamic=True)(torch.randn(2, 8))
    assert "SIZE_RELATIONS s0 = L['x'].size(0), s1 = L['x'].size(1): not (3 > s1);" in out.guards[0]


def test_ember_compile_a_size_used_as_a_float_keeps_static_shapes():
    # Symbolic floats are not built: the symbolic compile of this frame fails, and the frame
    # compiles with static shapes instead (one graph per size), never eagerly.
    metrics.reset()

    def f(x):
        return x * x.shape[-1] ** 0.5

    cf = ember.compile(f, dynamic=True)
    for T in [6, 7]:
        x = torch.randn(2, T)
        torch.testing.assert_close(cf(x), f(x))
    snap = metrics.snapshot()
    assert snap["graphs"] == 2 and snap["eager_frames"] == 0, (snap, metrics.fallback_reasons)


def test_explain_and_logs_show_the_symbols_their_sources_and_the_size_guards(caplog):
    def f(x):
        return x[:, :3] * 2

    out = str(ember.explain(f, dynamic=True)(torch.randn(2, 8)))
    assert "Shape symbols of graph 1:" in out
    assert 'symbol s1 : [2, inf] hint 8 "L[\'x\'].size()[1]"' in out
    assert "SIZE_RELATIONS s0 = L['x'].size(0), s1 = L['x'].size(1): not (3 > s1);" in out
    with ember.config.patch(logs="dynamic"), caplog.at_level("WARNING", logger="ember"):
        ember.compile(f, dynamic=True)(torch.randn(2, 8))
    text = caplog.text
    assert "compiled with shape symbols" in text and "symbol s1 : [2, inf]" in text, text
    assert "not (3 > s1)" in text, text


def test_ember_compile_a_graph_break_keeps_shape_symbols(caplog):
    # A break that is no fault of the symbols (a print) keeps both graphs of the frame symbolic:
    # the static compile that checks this breaks at the same place, and its logs are dropped.
    metrics.reset()

    def f(x):
        y = x.softmax(-1)
        print("", end="")
        return y * 2

    with ember.config.patch(logs="graph_breaks"), caplog.at_level("WARNING", logger="ember"):
        cf = ember.compile(f, dynamic=True)
        for B, T in [(2, 5), (3, 9), (4, 17)]:
            x = torch.randn(B, T)
            torch.testing.assert_close(cf(x), f(x))
    snap = metrics.snapshot()
    assert snap["graphs"] == 2 and snap["graph_breaks"] == 1, (snap, metrics.fallback_reasons)
    breaks = [r for r in caplog.records if "graph break" in r.getMessage()]
    assert len(breaks) == 1, [r.getMessage() for r in breaks]


def test_ember_config_dynamic_is_the_default_of_dynamic(monkeypatch):
    def f(x):
        return x.softmax(-1) * 2

    for setting, graphs in [("true", 1), ("false", 3), ("automatic", 2)]:
        metrics.reset()
        with ember.config.patch(dynamic=setting):
            cf = ember.compile(f)
        for T in [5, 9, 17]:
            x = torch.randn(2, T)
            torch.testing.assert_close(cf(x), f(x))
        assert metrics.snapshot()["graphs"] == graphs, setting
    monkeypatch.setenv("EMBER_DYNAMIC", "1")
    assert ember.config.dynamic == "true"
    monkeypatch.setenv("EMBER_DYNAMIC", "sometimes")
    with pytest.raises(ember.CompileError, match="EMBER_DYNAMIC"):
        ember.compile(f)


@pytest.mark.parametrize("case", ["bool_mask", "inplace_input_slice"])
def test_ember_compile_symbolic_indexing(case):
    # A bool list index compares its length with a symbolic dim 0 (a guard), and an in-place
    # update of a slice of an input copies into a strided view (the functional copy keeps the
    # view's strides).
    def bool_mask(x):
        return x[[True, False, True]] * 2

    def inplace_input_slice(x):
        x[:, 0] += 10
        return x.sum()

    f = {"bool_mask": bool_mask, "inplace_input_slice": inplace_input_slice}[case]
    metrics.reset()
    cf = ember.compile(f, dynamic=True)
    for T in [4, 6]:
        x = torch.randn(3, T)
        x2 = x.clone()
        torch.testing.assert_close(cf(x), f(x2))
        torch.testing.assert_close(x, x2)
    snap = metrics.snapshot()
    assert snap["graphs"] == 1 and snap["eager_frames"] == 0, (snap, metrics.fallback_reasons)


_SYMBOLIC_INT_INDEXES = {
    # Tensor indexing with sizes as ints (x[T - 1], x[:, T - 2], x[None, ..., B - 1]) selects
    # over the symbols: torch's getitem would read each through __index__, one graph per size.
    "last_row": lambda x: x[x.shape[0] - 1] * 2,
    "row_of_tuple": lambda x: x[x.shape[0] - 2, 1:] + 1,
    "column": lambda x: x[:, x.shape[1] - 1] * 3,
    "two_sizes": lambda x: x[x.shape[0] - 1, x.shape[1] // 2] + x[0, 0],
    "none_and_ellipsis": lambda x: x[None, ..., x.shape[1] - 1] * 2,
    "negative": lambda x: x[:, -x.shape[1] + 1] - 1,
    "diagonal": lambda x: torch.diagonal(x[:, :x.shape[0]]) * 2 + torch.diagonal(x, 1).sum(),
}


@pytest.mark.parametrize("case", sorted(_SYMBOLIC_INT_INDEXES))
def test_ember_compile_indexing_with_symbolic_ints(case):
    f = _SYMBOLIC_INT_INDEXES[case]
    metrics.reset()
    cf = ember.compile(f, dynamic=True)
    for B, T in [(3, 4), (5, 9), (7, 16)]:
        x = torch.randn(B, T)
        got, want = cf(x), f(x)
        assert got.shape == want.shape and got.stride() == want.stride()
        torch.testing.assert_close(got, want)
    snap = metrics.snapshot()
    assert snap["graphs"] == 1 and snap["dynamic_graphs"] == 1, (snap, metrics.fallback_reasons)
    assert snap["extern_steps"] == 0, snap  # the views are read through by one kernel


_RULE_CASES = {
    # name: (function of x with dims (B, T), example sizes of x); one class of op each.
    "cumsum": lambda x: x.cumsum(1) + x.cumprod(0),
    "topk": lambda x: x.topk(2, dim=-1).values * 2,
    "sort": lambda x: x.sort(-1).values + 1,
    "floor_divide": lambda x: torch.floor_divide(x * 10, 3.0) + torch.remainder(x, 0.5),
    "vector_norm": lambda x: torch.linalg.vector_norm(x, dim=-1, keepdim=True) * x,
    "mse_loss": lambda x: F.mse_loss(x, x.flip(0)) + F.mse_loss(x, 2 * x, reduction="none"),
    "index_tensor": lambda x: x[torch.tensor([0, 1, 0])] * 2,
    "index_two_dims": lambda x: x[torch.tensor([0, 1]), torch.tensor([1, 0])] + 1,
    "unbind": lambda x: sum(x[:2].unbind(0)) * 2,  # x[:2] has 2 rows at every size >= 2
    "conv1d": lambda x: F.conv1d(x[:, None], torch.ones(3, 1, 3), stride=2, padding=1),
    "conv_transpose1d": lambda x: F.conv_transpose1d(x[:, None], torch.ones(1, 2, 3), stride=2),
    "batch_norm": lambda x: F.batch_norm(x[:, None], torch.zeros(1), torch.ones(1)),
    # arange with float bounds or steps of integral value, and negative steps (XLNet's
    # relative positions: torch.arange(T, -T, -1.0)).
    "arange_negative_float_step": lambda x: x * torch.arange(x.shape[1], 0, -1.0),
    "arange_float_bounds": lambda x: x + torch.arange(0.0, x.shape[1], 1.0),
    "arange_negative_int_step": lambda x: x[:, :1] * torch.arange(x.shape[1] * 2, 0, -3),
    # Sequence pools and windows over a symbolic length: max_pool1d's own decomposition reads the
    # length as a number (ember decomposes it over symbols), unfold is a view of windows, and
    # group_norm's statistics are [N, groups].
    "max_pool1d": lambda x: F.max_pool1d(x[:, None], 3, 2, 1) * 2,
    "max_pool1d_ceil": lambda x: F.max_pool1d(x[:, None], 2, ceil_mode=True) + 1,
    "unfold": lambda x: x.unfold(1, 3, 2).sum(-1),
    "group_norm": lambda x: F.group_norm(torch.stack([x, x * 2, x + 1, -x], 1), 2),
    # interpolate: upsampling's `.vec` overloads decomposed over symbols (tracer/
    # symbolic_upsample.h): output sizes from scale factors (p / 2^k) or given.
    "interpolate_nearest": lambda x: F.interpolate(x[:, None], scale_factor=2.0) * 2,
    "interpolate_linear_half": lambda x: F.interpolate(x[:, None], scale_factor=0.5,
                                                       mode="linear"),
    "interpolate_size": lambda x: F.interpolate(x[:, None], size=7, mode="linear",
                                                align_corners=True),
    # Pads, batched products with a bias, pixel shuffles, order statistics, one-hot.
    "reflection_pad": lambda x: F.pad(x[:, None], (2, 3), mode="reflect"),
    "replicate_pad": lambda x: F.pad(x[:, None, None], (1, 2, 0, 1), mode="replicate"),
    "baddbmm": lambda x: torch.baddbmm(x[:, :1, None], x[:, :, None], x[:, None, :2]),
    "pixel_shuffle": lambda x: F.pixel_shuffle(
        x[:, None, None].expand(-1, 4, 1, -1).contiguous(), 2) * 2,
    "median_kthvalue_mode": lambda x: (x.median(1).values + x.kthvalue(2, 1).values
                                       + x.round().mode(1, keepdim=True).values[:, 0]),
    "one_hot": lambda x: F.one_hot(x.argmax(1) % 5, 5) * 2,
}


@pytest.mark.parametrize("case", sorted(_RULE_CASES))
def test_ember_compile_shape_rules_of_op_classes(case):
    # Each op class keeps one graph with shape symbols for every size, equal to eager.
    f = _RULE_CASES[case]
    metrics.reset()
    cf = ember.compile(f, dynamic=True)
    with torch.no_grad():
        for B, T in [(3, 8), (4, 11), (5, 17)]:
            x = torch.randn(B, T)
            torch.testing.assert_close(cf(x), f(x))
    snap = metrics.snapshot()
    assert snap["graphs"] == 1 and snap["eager_frames"] == 0, (snap, metrics.fallback_reasons)


def test_ember_compile_trains_a_sequence_convnet_over_symbolic_lengths():
    # Conv1d, group_norm, max_pool1d and an upsample over a symbolic length, forward and
    # backward: one graph pair for every length, gradients equal to eager's.
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv1d(2, 4, 3, padding=1), torch.nn.GroupNorm(2, 4),
                            torch.nn.ReLU(), torch.nn.MaxPool1d(3, 2, 1),
                            torch.nn.Upsample(scale_factor=2.0, mode="linear"))
    metrics.reset()
    cm = ember.compile(m, dynamic=True)
    for T in [9, 16, 31]:
        x = torch.randn(3, 2, T)
        got, want = cm(x), m(x)
        torch.testing.assert_close(got, want)
        got.square().sum().backward()
        grads = [p.grad.clone() for p in m.parameters()]
        m.zero_grad()
        want.square().sum().backward()
        for g, p in zip(grads, m.parameters()):
            torch.testing.assert_close(g, p.grad, rtol=1e-4, atol=1e-4)
        m.zero_grad()
    snap = metrics.snapshot()
    assert snap["graphs"] == 1 and snap["eager_frames"] == 0, (snap, metrics.fallback_reasons)


def test_ember_compile_trains_through_pads_over_symbolic_lengths():
    # Reflection and replication pads' backward ops over a symbolic length: one graph pair,
    # input gradients equal to eager's.
    torch.manual_seed(0)
    m = torch.nn.Conv1d(2, 3, 3)

    def f(x):
        return F.pad(m(x), (2, 1), mode="reflect") + F.pad(m(x), (1, 2), mode="replicate")

    metrics.reset()
    cf = ember.compile(f, dynamic=True)
    for T in [9, 14, 30]:
        x = torch.randn(2, 2, T, requires_grad=True)
        cf(x).square().sum().backward()
        got, x.grad = x.grad, None
        f(x).square().sum().backward()
        torch.testing.assert_close(got, x.grad)
    snap = metrics.snapshot()
    assert snap["graphs"] == 1 and snap["eager_frames"] == 0, (snap, metrics.fallback_reasons)


def test_an_inexact_scale_factor_over_a_symbol_compiles_per_size():
    # floor(L * 0.333..) is no exact expression over L: the frame keeps static shapes (one graph
    # per size; EMBER_LOGS=dynamic names the scale factor), right at every size, never eagerly.
    f = lambda x: F.interpolate(x[:, None], scale_factor=1 / 3)  # noqa: E731
    metrics.reset()
    cf = ember.compile(f, dynamic=True)
    for T in [9, 10, 11]:
        x = torch.randn(2, T)
        torch.testing.assert_close(cf(x), f(x))
    snap = metrics.snapshot()
    assert snap["graphs"] == 3 and snap["eager_frames"] == 0, (snap, metrics.fallback_reasons)


@pytest.mark.parametrize("model,make_inputs", [(GPT2Layer, _gpt2_inputs), (BertLayer, _bert_inputs)],
                         ids=["gpt2", "bert"])
def test_ember_compile_dynamic_true_on_the_issue_grid(model, make_inputs):
    # Issue 35's sizes: lengths 16..512 and batches 1..8, every pair. The hidden width is a
    # symbol too (dynamic=True) until the first LayerNorm or Linear pins it to its weight's 32,
    # after which `(C // H) ** 0.5` is a plain float. Batch 1 is specialized (0/1, as Dynamo's):
    # one graph for it, one for every other size.
    torch.manual_seed(0)
    metrics.reset()
    m = model().eval()
    cf = ember.compile(m, dynamic=True)
    with torch.no_grad():
        for T in [16, 17, 31, 64, 100, 128, 255, 256, 512]:
            for B in range(1, 9):
                args = make_inputs(B, T)
                torch.testing.assert_close(cf(*args), m(*args), rtol=1e-4, atol=1e-4)
    snap = metrics.snapshot()
    assert snap["eager_frames"] == 0 and snap["graph_breaks"] == 0, metrics.fallback_reasons
    assert snap["graphs"] == 2, snap


_IMAGE_RULE_CASES = {
    "max_pool": lambda x: F.max_pool2d(x, 3, stride=2, padding=1),
    "max_pool_ceil": lambda x: F.max_pool2d(x, 2, ceil_mode=True),
    "avg_pool": lambda x: F.avg_pool2d(x, 3, stride=2, ceil_mode=True, padding=1),
    "adaptive_avg_pool": lambda x: F.adaptive_avg_pool2d(x, (1, 1)).flatten(1) * 2,
    "interpolate_bilinear": lambda x: F.interpolate(x, scale_factor=2.0, mode="bilinear"),
    "interpolate_nearest_exact": lambda x: F.interpolate(x, scale_factor=1.5,
                                                         mode="nearest-exact"),
    "interpolate_bicubic_aa": lambda x: F.interpolate(x, scale_factor=0.5, mode="bicubic",
                                                      antialias=True),
    "conv_pool_nll": lambda x: F.nll_loss(
        F.log_softmax(F.adaptive_avg_pool2d(F.conv2d(x, torch.ones(4, 3, 3, 3), padding=1), 1)
                      .flatten(1), -1), torch.zeros(x.shape[0], dtype=torch.long)),
}


@pytest.mark.parametrize("case", sorted(_IMAGE_RULE_CASES))
def test_ember_compile_shape_rules_of_image_ops(case):
    # Pools (their size formula, ceil_mode's last-window rule) and losses at batch, height and
    # width of several sizes, odd ones included: one graph, equal to eager.
    f = _IMAGE_RULE_CASES[case]
    metrics.reset()
    cf = ember.compile(f, dynamic=True)
    with torch.no_grad():
        for B, H, W in [(2, 9, 12), (3, 16, 7), (4, 13, 13)]:
            x = torch.randn(B, 3, H, W)
            torch.testing.assert_close(cf(x), f(x))
    snap = metrics.snapshot()
    assert snap["eager_frames"] == 0, metrics.fallback_reasons
    assert snap["graphs"] == 1, (snap, metrics.fallback_reasons)


def test_ember_compile_sizes_in_the_state_at_a_graph_break():
    # A symbolic size (`n`) and a shape of symbolic sizes (`shape`) live across a graph break:
    # the segment rebuilds them per call from the inputs' sizes (never the trace's SymInts), so
    # the frame before the break keeps its symbols. The resume function gets them as ints.
    metrics.reset()

    def f(x):
        shape = x.shape
        n = x.shape[0] * 2
        print("", end="")
        return x.reshape(-1).view(shape) * n, n, shape

    cf = ember.compile(f, dynamic=True)
    for B in [3, 5, 7]:
        x = torch.randn(B, 4)
        out, n, shape = cf(x)
        torch.testing.assert_close(out, x * 2 * B)
        assert n == 2 * B and type(n) is int
        assert shape == torch.Size([B, 4]) and type(shape) is torch.Size
    snap = metrics.snapshot()
    assert snap["eager_frames"] == 0 and snap["graph_breaks"] == 1, metrics.fallback_reasons
    recs = [r for r in ember.capture.records()
            if r["code"].endswith("test_ember_compile_sizes_in_the_state_at_a_graph_break.<locals>.f)")]
    assert len(recs) == 1, recs  # the frame before the break compiled once, with symbols


def test_attention_fusion_over_shape_symbols():
    # Eager attention (bmm, scale, mask, softmax, bmm) becomes one fused node in a symbolic graph
    # too (on the CPU where asked, as for static graphs; by default on CUDA): its heads [B, H] are
    # an argument over the symbols, evaluated per call. Below 128 keys the node runs eager's ops,
    # from 128 SDPA (Note [Short attention on the CPU]): both sides of that line here.
    torch.manual_seed(0)
    m = BertLayer().eval()
    with ember.config.patch(fuse_attention=1):
        c = ember.compile(m, dynamic=True)
    metrics.reset()
    with torch.no_grad(), ember.config.patch(fuse_attention=1):
        for B, T in [(2, 16), (3, 17), (2, 31), (5, 64), (2, 128), (3, 200)]:
            args = _bert_inputs(B, T)
            torch.testing.assert_close(c(*args), m(*args), rtol=1e-4, atol=1e-4)
    snap = metrics.snapshot()
    assert snap["graphs"] == 1 and snap["fused_attention"] == 1, snap
    with ember.config.patch(fuse_attention=0):  # off: the same results from the unfused ops
        ember._C.clear_capture_cache(None)
        off = ember.compile(m, dynamic=True)
        metrics.reset()
        with torch.no_grad():
            args = _bert_inputs(2, 40)
            torch.testing.assert_close(off(*args), m(*args), rtol=1e-4, atol=1e-4)
        assert metrics.snapshot()["fused_attention"] == 0


MATMUL_RANKS = [((5,), (5,)), ((3, 5), (5,)), ((5,), (5, 4)), ((3, 5), (5, 4)), ((2, 3, 5), (5, 4)),
                ((2, 3, 5), (5,)), ((2, 3, 5), (2, 5, 4)), ((2, 1, 3, 5), (4, 5, 6)),
                ((3, 5), (2, 5, 4)), ((5,), (2, 5, 4)), ((2, 4, 3, 5), (2, 4, 5, 6))]


@pytest.mark.parametrize("shapes", MATMUL_RANKS, ids=lambda s: f"{len(s[0])}d@{len(s[1])}d")
def test_matmul_of_every_rank_over_shape_symbols(shapes):
    # matmul decomposes over SymInts on tracer tensors (tracer/symbolic_matmul.h), the same on
    # every torch (torch 2.11's own decomposition reads sizes as numbers): one graph for every
    # size, forward and backward equal to eager's.
    sa, sb = shapes
    f = lambda a, b: (a @ b) * 2  # noqa: E731
    c = ember.compile(f, dynamic=True)
    metrics.reset()
    for k in (0, 1, 3):
        a = torch.randn(*(d + k if d > 1 else d for d in sa), requires_grad=True)
        inner = [a.shape[-1]] if len(sb) == 1 else [a.shape[-1], sb[-1] + k]
        b = torch.randn(*(d + k if d > 1 else d for d in sb[:-2]), *inner, requires_grad=True)
        got, want = c(a, b), f(a, b)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        for x, y in zip(torch.autograd.grad(got.sum(), (a, b)), torch.autograd.grad(want.sum(), (a, b))):
            torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-5)
    assert metrics.snapshot()["graphs"] == 1, metrics.fallback_reasons


def test_a_size_pinned_by_a_guard_is_a_constant_to_kernels():
    # dynamic=True makes every dim a symbol; the norm's weight pins the width (s2 == 16). The
    # input's type then reads f32[s0, s1, 16] to the compiler (graph::fold_pinned_inputs), so the
    # layer norm over it is a kernel, as over any other value, and a call of another width fails
    # the guard and recompiles.
    ln = torch.nn.LayerNorm(16)

    def f(x):
        return ln(x) * 2

    metrics.reset()
    cf = ember.compile(f, dynamic=True)
    with torch.no_grad():
        for B, T in [(2, 3), (3, 17)]:
            x = torch.randn(B, T, 16)
            torch.testing.assert_close(cf(x), f(x))
    snap = metrics.snapshot()
    assert snap["graphs"] == 1 and snap["dynamic_graphs"] == 1, (snap, metrics.fallback_reasons)
    assert snap["kernels"] == 1 and snap["extern_steps"] == 0, snap
