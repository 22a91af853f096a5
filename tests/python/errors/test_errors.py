"""Errors: what ember cannot or must not compile gives a clear ember.errors exception (from
ember.trace) or a clean fallback (through torch.compile) with a correct result; never an
InternalError and never a crash."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo.config as dynamo_config

import ember
from ember import errors

from ember.testing import compare

pytestmark = pytest.mark.skipif(
    not hasattr(ember, "trace") and not hasattr(ember, "backend"), reason="ember has no entry points yet")

needs_trace = pytest.mark.skipif(not hasattr(ember, "trace"), reason="ember.trace not available")


def _trace_raises(exc_type, fn, inputs, *words):
    """ember.trace(fn, inputs) raises exc_type (not InternalError), its message naming `words`."""
    with pytest.raises(Exception) as info:
        ember.trace(fn, inputs)
    e = info.value
    assert not isinstance(e, errors.InternalError), f"InternalError: {e}"
    assert isinstance(e, exc_type), f"expected {exc_type.__name__}, got {type(e).__module__}.{type(e).__name__}: {e}"
    msg = str(e).lower()
    for w in words:
        assert w.lower() in msg, f"message should mention {w!r}: {e}"
    return e


# ---------------------------------------------------------------------------------------------
# ember.trace: invalid and unsupported inputs
# ---------------------------------------------------------------------------------------------


@needs_trace
def test_trace_works_on_plain_function():
    g = ember.trace(lambda x, y: (x * y).sin(), [torch.randn(3), torch.randn(3)])
    assert isinstance(g, ember.Graph)
    assert g.num_nodes >= 2
    text = str(g)
    assert "mul" in text and "sin" in text, text


@needs_trace
def test_trace_module_and_graph_module():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()).eval()
    g = ember.trace(m, [torch.randn(2, 4)])
    assert g.num_nodes >= 2, str(g)
    gm = torch.fx.symbolic_trace(m)
    g2 = ember.trace(gm, [torch.randn(2, 4)])
    assert g2.num_nodes == g.num_nodes, (str(g), str(g2))
    if hasattr(g, "print"):
        g.print()


@needs_trace
def test_trace_dict_input_is_compile_error():
    _trace_raises(errors.CompileError, lambda d: d["x"] + 1, [{"x": torch.randn(3)}], "dict")


@needs_trace
@pytest.mark.parametrize("value", ["relu", 3, 2.5, None], ids=["str", "int", "float", "None"])
def test_trace_non_tensor_input_is_compile_error(value):
    _trace_raises(errors.CompileError, lambda x, v: x * 2, [torch.randn(3), value],
                  "input 1", type(value).__name__)


@needs_trace
@pytest.mark.parametrize("make", [lambda: torch.randn(3, 3).to_sparse(),
                                  lambda: torch.randn(3, 3).to_sparse_csr()], ids=["coo", "csr"])
def test_trace_sparse_input_is_unsupported(make):
    _trace_raises(errors.Unsupported, lambda x: x * 2, [make()], "input 0", "sparse")


@needs_trace
def test_trace_dict_output_is_unsupported_or_works():
    try:
        ember.trace(lambda x: {"y": x + 1}, [torch.randn(2)])
    except Exception as e:  # noqa: BLE001
        assert isinstance(e, errors.Unsupported) and not isinstance(e, errors.InternalError), repr(e)
        assert "dict" in str(e), e


# ---------------------------------------------------------------------------------------------
# ember.trace: data-dependent ops
# ---------------------------------------------------------------------------------------------


_DATA_DEPENDENT = {
    "item_as_number": lambda x: x * float(x.sum().item()),
    "item_in_python_if": lambda x: x + 1 if x.sum().item() > 0 else x - 1,
    "tolist": lambda x: x * len([v for v in x.tolist() if v > 0]),
    "nonzero": lambda x: torch.nonzero(x),
    "bool_mask_index": lambda x: x[x > 0] * 2,
    "masked_select": lambda x: torch.masked_select(x, x > 0),
    "unique": lambda x: torch.unique(x),
    "tensor_as_bool": lambda x: x * 2 if (x > 0).any() else x,
}


@needs_trace
@pytest.mark.parametrize("name", list(_DATA_DEPENDENT))
def test_trace_data_dependent_raises(name):
    _trace_raises(errors.DataDependentError, _DATA_DEPENDENT[name], [torch.tensor([0.0, 1.5, -2.0, 3.0])])


# ---------------------------------------------------------------------------------------------
# torch.compile: clean fallbacks, correct results
# ---------------------------------------------------------------------------------------------


def _compile_and_compare(fn, *arg_sets, **compile_kw):
    """Compile fn with ember, call it on each argument set, compare with eager. Returns counters."""
    torch._dynamo.reset()
    ember.metrics.reset()
    compiled = torch.compile(fn, backend="ember", **compile_kw)
    for args in arg_sets:
        expected = fn(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
        try:
            actual = compiled(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
        except errors.InternalError as e:
            pytest.fail(f"InternalError through torch.compile: {e}")
        compare(expected, actual, check_strides=False)
    snap = ember.metrics.snapshot()
    snap["fallback_reasons"] = list(ember.metrics.fallback_reasons)
    assert len(snap["fallback_reasons"]) == snap["fallbacks"], snap
    assert all(isinstance(r, str) and r.strip() for r in snap["fallback_reasons"]), snap
    return snap


@pytest.mark.parametrize("name", ["item_as_number", "nonzero", "bool_mask_index", "masked_select"])
def test_compile_data_dependent_captured_by_dynamo_falls_back(name):
    # With these Dynamo options the data-dependent op is inside the graph ember receives:
    # ember must fall back (DataDependentError -> eager), not crash.
    fn = _DATA_DEPENDENT[name]
    with dynamo_config.patch(capture_scalar_outputs=True, capture_dynamic_output_shape_ops=True):
        snap = _compile_and_compare(fn, (torch.tensor([0.0, 1.5, -2.0, 3.0]),))
    assert snap["fallbacks"] >= 1, snap
    assert any("data" in r.lower() or "dynamic" in r.lower() or "symbolic" in r.lower()
               for r in snap["fallback_reasons"]), snap


@pytest.mark.parametrize("name", list(_DATA_DEPENDENT))
def test_compile_data_dependent_default_config(name):
    # Default Dynamo config: Dynamo graph-breaks around most of these; whatever reaches ember
    # compiles or falls back cleanly, and the result is right.
    _compile_and_compare(_DATA_DEPENDENT[name], (torch.tensor([0.0, 1.5, -2.0, 3.0]),))


def test_compile_string_argument_is_specialized(check):
    # A str argument is a constant to Dynamo: ember sees a graph specialized on it.
    def f(x, mode):
        return x.relu() if mode == "relu" else x.sigmoid()

    check.captured(f, (torch.randn(4), "relu"))
    check.captured(f, (torch.randn(4), "sigmoid"))


def test_compile_changing_int_argument_falls_back_or_recompiles():
    # The second call makes Dynamo treat the int as dynamic (a SymInt input that is no tensor's
    # size): ember falls back cleanly for that graph (test_diff_dynamic_shapes.py).
    def f(x, n):
        return x * n + 1

    snap = _compile_and_compare(f, (torch.randn(3), 2), (torch.randn(3), 3), (torch.randn(3), 4))
    assert snap["graphs"] + snap["fallbacks"] >= 2, snap


def test_compile_changing_shapes_falls_back_or_recompiles():
    # Automatic dynamic shapes: the second shape makes Dynamo mark dims dynamic, and ember
    # compiles that graph with shape symbols (test_diff_dynamic_shapes.py).
    snap = _compile_and_compare(lambda x: (x * 2).sum(-1), (torch.randn(3, 4),), (torch.randn(5, 4),),
                                (torch.randn(7, 4),))
    assert snap["graphs"] + snap["fallbacks"] >= 2, snap


def test_compile_dynamic_true_compiles_a_symbolic_graph():
    snap = _compile_and_compare(lambda x: x.softmax(-1), (torch.randn(3, 4),), dynamic=True)
    assert snap["graphs"] == 1 and snap["dynamic_graphs"] == 1 and snap["fallbacks"] == 0, snap


@pytest.mark.parametrize("make", [lambda: torch.randn(3, 3).to_sparse(),
                                  lambda: torch.randn(3, 3).to_sparse_csr()], ids=["coo", "csr"])
def test_compile_sparse_input(make):
    _compile_and_compare(lambda x: x * 2, (make(),))


def test_compile_complex_input():
    _compile_and_compare(lambda x: (x * x.conj()).real + x.abs(),
                         (torch.randn(4, dtype=torch.complex64),))


def test_compile_op_error_is_the_eager_error():
    # A genuine user error (shape mismatch) must surface as PyTorch's error, not InternalError.
    def f(x, y):
        return x @ y

    torch._dynamo.reset()
    with pytest.raises(Exception) as info:
        torch.compile(f, backend="ember")(torch.randn(2, 3), torch.randn(4, 5))
    assert not isinstance(info.value, errors.InternalError), repr(info.value)
