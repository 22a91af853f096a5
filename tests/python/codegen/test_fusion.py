"""Generated kernels: pointwise fusion on CPU, asserted by kernel counters, differential against
eager (ember.testing.check_model)."""

import pytest
import torch
import torch.nn.functional as F

import ember
from ember.testing import check_model


def test_chain_of_pointwise_ops_is_one_kernel():
    def f(x, b):
        return F.gelu(x + b) * 2 - 1

    stats = check_model(f, (torch.randn(8, 33), torch.randn(33)), expect_graphs=1,
                        expect_fallbacks=0)
    assert stats["kernels"] == 1
    assert stats["fused_nodes"] >= 4


def test_bias_and_gelu_after_matmul_are_one_kernel():
    lin = torch.nn.Linear(16, 32)

    def f(x):
        return F.gelu(x @ lin.weight.t() + lin.bias)

    stats = check_model(f, (torch.randn(4, 16),), expect_graphs=1, expect_fallbacks=0)
    assert stats["kernels"] == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_activations_fused(dtype):
    def f(x):
        return torch.sigmoid(x) * torch.tanh(x) + F.silu(x) - F.relu(-x) + torch.exp(x / 4)

    stats = check_model(f, (torch.randn(5, 7, dtype=dtype),), expect_graphs=1, expect_fallbacks=0)
    assert stats["kernels"] == 1


def test_broadcast_and_strided_inputs():
    def f(x, y, z):
        return (x * y + z).sqrt()

    x = torch.rand(6, 1, 5)
    y = torch.rand(5, 4).t()  # non-contiguous, broadcast against x
    z = torch.rand(5)
    stats = check_model(f, (x, y, z), expect_graphs=1, expect_fallbacks=0)
    assert stats["kernels"] == 1


def test_transposed_input_keeps_eager_strides():
    def f(x):
        return x.t() * 3 + 1

    check_model(f, (torch.randn(5, 9),), expect_graphs=1, expect_fallbacks=0)


def test_comparisons_and_where():
    def f(x, y):
        return torch.where(x > y, x - y, torch.zeros_like(x)), (x == y).logical_not()

    check_model(f, (torch.randn(3, 4), torch.randn(3, 4)), expect_graphs=1, expect_fallbacks=0)


def test_nan_and_inf_propagate_like_eager():
    def f(x):
        return torch.maximum(x, torch.zeros_like(x)) + torch.clamp(x, -1, 1)

    x = torch.tensor([[float("nan"), float("inf"), -float("inf"), 0.5, -3.0]])
    check_model(f, (x,), expect_graphs=1, expect_fallbacks=0)


def test_other_strides_at_call_time_run_unfused_and_correct():
    compiled = torch.compile(lambda x: x * 2 + 1, backend="ember")
    x = torch.randn(4, 6)
    torch.testing.assert_close(compiled(x), x * 2 + 1)
    xt = torch.randn(6, 4).t()  # same sizes, other strides: Dynamo may recompile or reuse
    torch.testing.assert_close(compiled(xt), xt * 2 + 1)


def test_codegen_off_gives_no_kernels(monkeypatch):
    monkeypatch.setenv("EMBER_CODEGEN", "0")
    stats = check_model(lambda x: x.sin() + 1, (torch.randn(3),), expect_graphs=1)
    assert stats["kernels"] == 0


def test_generated_source_is_deterministic():
    g = ember.trace(lambda x: F.gelu(x) * x, [torch.randn(4, 4)])
    a = ember._C.CompiledGraph(g).kernel_sources
    b = ember._C.CompiledGraph(g).kernel_sources
    assert a == b and len(a) == 1
    assert "ember_kernel_k0" in a[0]


# An ATen op whose result has other strides than its meta function says: kernels read ATen
# results at their traced strides, so such a call must run unfused.
_LIB = torch.library.Library("ember_test_fusion", "DEF")
_LIB.define("colmajor(Tensor x) -> Tensor")
_LIB.impl("colmajor", lambda x: (x * 1).t().contiguous().t(), "CPU")  # column-major
_LIB.impl("colmajor", lambda x: torch.empty_like(x, memory_format=torch.contiguous_format), "Meta")


def test_aten_results_with_other_strides_than_traced_run_unfused():
    def f(x):
        y = torch.ops.ember_test_fusion.colmajor(x)
        return y + 1, y.t()[1:] * 2

    # Eager's own result strides differ from the meta function's: compare values only.
    stats = check_model(f, (torch.randn(3, 4),), check_strides=False, expect_graphs=1,
                        expect_fallbacks=0)
    assert stats["kernels"] == 1, stats  # the two kernels are independent: one combo kernel


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_number_to_a_tensor_power_is_fused(dtype):
    # aten::pow.Scalar (Adam's bias corrections, beta ** step): kernels, not an ATen call (the
    # [1]-shaped bias term is its own kernel).
    def f(step, x):
        return (1 - 0.9 ** step) * x + 2.0 ** (x / 4)

    stats = check_model(f, (torch.rand(1, dtype=dtype) * 10, torch.randn(6, 5, dtype=dtype)),
                        expect_graphs=1, expect_fallbacks=0)
    assert stats["extern_steps"] == 0 and "aten::pow.Scalar" not in str(stats), stats


def test_integer_power_of_a_number_stays_an_aten_call():
    def f(e):
        return 3 ** e

    check_model(f, (torch.arange(6),), expect_graphs=1, expect_fallbacks=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_masked_fill_is_pointwise_and_broadcasts_like_eager(dtype):
    # The out-of-place masked_fill expands self and the mask together; the value is converted to
    # self's dtype. A causal mask over attention scores is the common case.
    fill = {torch.float32: float("-inf"), torch.bfloat16: -1e4, torch.int64: -7, torch.bool: True}

    def f(x, mask, row_mask):
        y = (x * 2).masked_fill(mask, fill[dtype]) if dtype != torch.bool else x.masked_fill(mask, True)
        z = x.masked_fill(row_mask, 0)  # a mask of more dims than self: the result grows
        return y, z

    if dtype == torch.bool:
        x = torch.rand(2, 3, 5, 5) > 0.5
    elif dtype.is_floating_point:
        x = torch.randn(2, 3, 5, 5, dtype=dtype)
    else:
        x = torch.randint(-5, 5, (2, 3, 5, 5), dtype=dtype)
    mask = ~torch.ones(5, 5, dtype=torch.bool).tril()
    row_mask = torch.rand(4, 1, 1, 1, 5) > 0.5
    stats = check_model(f, (x, mask, row_mask), expect_graphs=1, expect_fallbacks=0)
    assert stats["extern_steps"] == 0 and stats["kernels"] >= 1


def test_masked_fill_with_a_tensor_value_and_softmax_is_one_kernel():
    def f(scores, mask):
        return scores.masked_fill(mask, torch.tensor(float("-inf"))).softmax(-1)

    scores = torch.randn(2, 4, 7, 7)
    mask = ~torch.ones(7, 7, dtype=torch.bool).tril()
    stats = check_model(f, (scores, mask), expect_graphs=1, expect_fallbacks=0)
    assert stats["kernels"] == 1


# Note [Selects of loads] (cpp_emitter.cpp): a select whose arm reads a buffer evaluates both
# arms where every read stays inside its buffer, so its loop vectorizes: ReLU's backward (the
# gradient read where the input was positive) and a masked fill. A concatenation along the inner
# loop is split into one loop per part instead (loop/split_loops.h): no select is left. Against
# eager.
@pytest.mark.parametrize("name,fn,args,select", [
    ("relu_backward", lambda g, x: torch.ops.aten.threshold_backward(g, torch.relu(x + 1), 0),
     (torch.randn(2, 8, 12, 12), torch.randn(2, 8, 12, 12)), True),
    ("cat", lambda a, b: torch.cat([a * 2, b.exp()], dim=2), (torch.randn(3, 7, 5),
                                                              torch.randn(3, 7, 4)), False),
    ("masked_fill", lambda x, m: (x * 3).masked_fill(m, 0.0) + x.where(m, x * 2),
     (torch.randn(6, 33), torch.rand(6, 33) < 0.5), True),
])
def test_selects_of_loads_read_both_arms(name, fn, args, select):
    g = ember.trace(fn, list(args))
    compiled = ember._C.CompiledGraph(g)
    sources = "\n".join(src.split('extern "C" void', 1)[1] for src in compiled.kernel_sources)
    assert ("= ember_select(" in sources) == select, sources
    if not select:  # each part read as it is: no clamped index
        assert "ember_min<int64_t>(ember_max" not in sources, sources
    torch.testing.assert_close(compiled(*args)[0], fn(*args))
