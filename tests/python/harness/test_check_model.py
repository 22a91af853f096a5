"""Tests of ember.testing.check_model itself, with deliberately wrong backends: the harness
must notice wrong values, dtypes, shapes, strides, lost mutations, broken aliasing and
wrong module state. These do not use ember's compiler."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn as nn

from ember.testing import check_model, clone_inputs, compare


def _interpreting_backend(transform_output=None, skip_mutations=False):
    """A backend that runs the FX graph node by node, optionally corrupting things."""

    def backend(gm, example_inputs):
        def run(*args):
            if skip_mutations:
                args = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
            out = gm(*args)
            return transform_output(out) if transform_output else out

        return run

    return backend


def _map_tensors(fn):
    def tx(out):
        if isinstance(out, torch.Tensor):
            return fn(out)
        if isinstance(out, (list, tuple)):
            return type(out)(tx(o) for o in out)
        return out

    return tx


def test_passes_with_correct_backend():
    res = check_model(lambda x: x.sin() + 1, (torch.randn(3),), backend=_interpreting_backend())
    assert set(res) >= {"graphs", "nodes", "fallbacks", "fallback_reasons"}


def test_detects_wrong_values():
    bad = _interpreting_backend(_map_tensors(lambda t: t + 1e-3 if t.is_floating_point() else t))
    with pytest.raises(AssertionError, match=r"output out.*values differ.*max abs diff 0\.001"):
        check_model(lambda x: x.sin() + 1, (torch.randn(3, 4),), backend=bad)


def test_tolerance_override():
    bad = _interpreting_backend(_map_tensors(lambda t: t + 1e-4))
    check_model(lambda x: x * 2, (torch.randn(3),), backend=bad, atol=1e-3)


def test_bf16_default_tolerance_is_loose():
    bad = _interpreting_backend(_map_tensors(lambda t: t * (1 + 4e-3)))
    check_model(lambda x: x * 2, (torch.randn(8).bfloat16(),), backend=bad)
    with pytest.raises(AssertionError, match="values differ"):
        check_model(lambda x: x * 2, (torch.randn(8),), backend=bad)


def test_detects_wrong_integer_values():
    bad = _interpreting_backend(_map_tensors(lambda t: t if t.is_floating_point() else t + 1))
    with pytest.raises(AssertionError, match=r"out\[1\].*values differ.*max abs diff 1;"):
        check_model(lambda x: (x.float(), x * 2), (torch.arange(4),), backend=bad)


def test_detects_wrong_dtype():
    bad = _interpreting_backend(_map_tensors(lambda t: t.double()))
    with pytest.raises(AssertionError, match="dtype differs: eager torch.float32, compiled torch.float64"):
        check_model(lambda x: x + 1, (torch.randn(3),), backend=bad)


def test_detects_wrong_shape():
    bad = _interpreting_backend(_map_tensors(lambda t: t.reshape(-1)))
    with pytest.raises(AssertionError, match=r"shape differs: eager \[2, 3\], compiled \[6\]"):
        check_model(lambda x: x + 1, (torch.randn(2, 3),), backend=bad)


def test_detects_wrong_strides_and_can_skip():
    bad = _interpreting_backend(_map_tensors(lambda t: t.t().contiguous().t()))
    with pytest.raises(AssertionError, match="strides differ"):
        check_model(lambda x: x + 1, (torch.randn(2, 3),), backend=bad)
    check_model(lambda x: x + 1, (torch.randn(2, 3),), backend=bad, check_strides=False,
                check_aliasing=False)


def test_strides_of_size_one_dims_ignored():
    bad = _interpreting_backend(_map_tensors(lambda t: t.as_strided(t.shape, (4, 99, 1))))
    check_model(lambda x: x * 1, (torch.randn(2, 1, 4),), backend=bad)


def test_detects_lost_input_mutation():
    def f(x):
        x.add_(1)
        return x.sum()

    bad = _interpreting_backend(skip_mutations=True)
    with pytest.raises(AssertionError, match=r"input after the run args\[0\].*values differ"):
        check_model(f, (torch.randn(3),), backend=bad)


def test_detects_broken_aliasing():
    bad = _interpreting_backend(_map_tensors(lambda t: t.clone()))
    with pytest.raises(AssertionError, match="aliasing of out differs"):
        check_model(lambda x: x.t(), (torch.randn(2, 3),), backend="eager" if False else bad,
                    check_strides=False)


def test_detects_wrong_module_state():
    def backend(gm, example_inputs):
        def run(*args):
            saved = [a.clone() for a in args]
            out = gm(*args)
            for a, s in zip(args, saved):
                a.copy_(s)  # undo the running-stat updates
            return out

        return run

    bn = nn.BatchNorm1d(3).train()
    with pytest.raises(AssertionError, match=r"module state after the run module\['running_mean'\]"):
        check_model(bn, (torch.randn(4, 3),), backend=backend)


def test_module_copies_are_independent():
    bn = nn.BatchNorm1d(3).train()
    before = {k: v.clone() for k, v in bn.state_dict().items()}
    check_model(bn, (torch.randn(4, 3),), backend="eager")
    for k, v in bn.state_dict().items():
        assert torch.equal(v, before[k]), k


def test_random_ops_seeded():
    check_model(lambda x: x + torch.randn(5), (torch.zeros(5),), backend="eager")

    def reseeding_backend(gm, example_inputs):
        def run(*args):
            torch.manual_seed(123)
            return gm(*args)

        return run

    with pytest.raises(AssertionError, match="values differ"):
        check_model(lambda x: x + torch.randn(5), (torch.zeros(5),), backend=reseeding_backend)


def test_metadata_only_for_empty():
    check_model(lambda x: (torch.empty(3, 4), x + 1), (torch.randn(2),), backend="eager",
                metadata_only={"out[0]"})


def test_containers_and_python_values():
    def f(x):
        return {"a": [x + 1, (x * 2, None)], "n": 3, "s": x.shape}

    check_model(f, (torch.randn(2),), backend="eager")

    def g(x):
        return [x + 1]

    tupling = _interpreting_backend(lambda out: out)
    check_model(g, (torch.randn(2),), backend=tupling)


def test_compare_paths_and_types():
    with pytest.raises(AssertionError, match=r"out\['k'\]\[1\]: .*values differ"):
        compare({"k": (torch.zeros(2), torch.zeros(2))}, {"k": (torch.zeros(2), torch.ones(2))})
    with pytest.raises(AssertionError, match="type differs: eager tuple, compiled list"):
        compare((1, 2), [1, 2])
    with pytest.raises(AssertionError, match="keys differ"):
        compare({"a": 1}, {"b": 1})
    with pytest.raises(AssertionError, match=r"out\[0\]: differs: eager 1, compiled 2"):
        compare([1], [2])
    compare(float("nan"), float("nan"))
    compare(torch.tensor([float("nan"), float("inf")]), torch.tensor([float("nan"), float("inf")]))
    with pytest.raises(AssertionError, match="values differ"):
        compare(torch.tensor([float("inf")]), torch.tensor([float("-inf")]))


def test_model_output_like():
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_outputs import BaseModelOutput

    a = BaseModelOutput(last_hidden_state=torch.zeros(2))
    b = BaseModelOutput(last_hidden_state=torch.ones(2))
    with pytest.raises(AssertionError, match=r"out\.last_hidden_state: values differ"):
        compare(a, b)


def test_clone_inputs_keeps_layout_and_aliasing():
    base = torch.randn(4, 6)
    a, b, c = base.t(), base[1:, ::2], base[0]
    ca, cb, cc = clone_inputs((a, b, c))
    for x, y in ((a, ca), (b, cb), (c, cc)):
        assert x.stride() == y.stride() and x.storage_offset() == y.storage_offset()
        assert torch.equal(x, y)
        assert y.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    assert ca.untyped_storage().data_ptr() == cb.untyped_storage().data_ptr() == cc.untyped_storage().data_ptr()
    x = torch.randn(3)
    c1, c2 = clone_inputs((x, x))
    assert c1 is c2 and c1 is not x
    r = torch.randn(3, requires_grad=True)
    (cr,) = clone_inputs([r])
    assert cr.requires_grad and cr.is_leaf


def test_grad_comparison_detects_wrong_gradient():
    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            return g * 2  # wrong on purpose

    def backend(gm, example_inputs):
        def run(*args):
            out = gm(*args)
            return _map_tensors(Scale.apply)(out)

        return run

    x = torch.randn(3, requires_grad=True)
    check_model(lambda x: x.sin(), (x,), backend="eager", grad=True)
    with pytest.raises(AssertionError, match=r"gradient grads\['args\[0\]\.grad'\]"):
        check_model(lambda x: x.sin(), (x,), backend=backend, grad=True)


def test_expect_counters_checked():
    # No ember backend here: the counters stay 0.
    with pytest.raises(AssertionError, match=re.escape("expected 1 ember graph(s), got 0")):
        check_model(lambda x: x + 1, (torch.randn(2),), backend="eager", expect_graphs=1)
    check_model(lambda x: x + 1, (torch.randn(2),), backend="eager", expect_graphs=0,
                expect_fallbacks=0)


def test_detects_baked_in_input_values():
    def backend(gm, example_inputs):
        frozen = [x.clone() for x in example_inputs]

        def run(*args):
            return gm(*frozen)  # ignores the real inputs

        return run

    with pytest.raises(AssertionError, match=r"\[run 2 of 2\] output out: values differ"):
        check_model(lambda x: x * 2, (torch.randn(4),), backend=backend)
    check_model(lambda x: x * 2, (torch.randn(4),), backend=backend, vary_inputs=False)
