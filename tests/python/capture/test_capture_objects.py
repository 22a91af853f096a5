"""Exceptions, with blocks, objects of the program's classes and stores to objects from outside
the frame: captured whole, differential against eager."""

from __future__ import annotations

import abc
import contextlib
import copy
import dataclasses
from collections import OrderedDict
from collections.abc import Mapping
from typing import NamedTuple

import pytest
import torch
import torch.nn as nn

from capture_check import check, expect_frames, same

import ember


def r(*shape):
    return torch.randn(*shape)


# --- Exceptions --------------------------------------------------------------------------------

def test_raise_and_catch_in_frame():
    def f(x):
        try:
            y = x + 1
            raise ValueError("boom")
        except ValueError:
            y = y * 2
        return y
    check(f, r(3))


def test_exception_from_callee_caught_by_tuple():
    def g(x):
        raise KeyError("k")

    def f(x):
        try:
            return g(x)
        except (IndexError, KeyError):
            return x - 1
    check(f, r(3))


def test_exception_object_and_message():
    def f(x):
        try:
            raise ValueError("scale", 3)
        except ValueError as e:
            return x * e.args[1]
    check(f, r(3))


def test_finally_runs_on_both_paths():
    def g(x, fail):
        try:
            if fail:
                raise RuntimeError("no")
            return x + 1
        finally:
            x.mul_(2)

    def f(x):
        a = g(x, False)
        try:
            g(x, True)
        except RuntimeError:
            pass
        return a + x
    check(f, r(3))


def test_reraise_to_outer_handler():
    def g(x):
        try:
            raise KeyError("a")
        except KeyError:
            raise

    def f(x):
        try:
            g(x)
        except KeyError:
            return x * 3
        return x
    check(f, r(3))


def test_raise_from_and_nested_handlers():
    def f(x):
        try:
            try:
                {}["missing"]
            except KeyError as e:
                raise ValueError("wrapped") from e
        except ValueError as e:
            return x + (1 if isinstance(e.__cause__, KeyError) else 0)
    check(f, r(3))


def test_exception_raised_by_a_torch_call_is_caught():
    def f(x):
        try:
            torch.cat([x, x.reshape(1, 3)])
            ok = 1
        except RuntimeError:
            ok = 2
        return x * ok
    check(f, r(3))


def test_assert_passes():
    def f(x):
        assert x.dim() == 1, "rank"
        return x + 1
    check(f, r(3))


def test_uncaught_exception_runs_eagerly_and_raises():
    def f(x):
        if x.dim() == 1:
            raise ValueError("rank 1")
        return x
    c = ember.compile(f)
    for _ in range(2):
        with pytest.raises(ValueError, match="rank 1"):
            c(r(3))


def test_handled_exception_is_restored_after_except():
    def f(x):
        try:
            raise KeyError("a")
        except KeyError:
            try:
                raise ValueError("b")
            except ValueError:
                pass
            try:
                raise  # re-raises the KeyError being handled
            except KeyError:
                return x + 5
    check(f, r(3))


# --- with blocks ---------------------------------------------------------------------------

def test_no_grad_block_keeps_grad_mode():
    def f(x):
        with torch.no_grad():
            y = x * 3
        with contextlib.nullcontext() as nothing:
            y = y + (1 if nothing is None else 2)
        return y
    check(f, r(3))
    assert torch.is_grad_enabled()


class Scale:
    def __init__(self, k):
        self.k = k

    def __enter__(self):
        return self.k

    def __exit__(self, typ, value, tb):
        return typ is KeyError  # suppresses KeyError only


def test_program_context_manager():
    def f(x):
        with Scale(3) as k:
            y = x * k
        with Scale(2):
            raise KeyError("suppressed")
        return y
    check(f, r(3))


def test_context_manager_does_not_suppress():
    def f(x):
        try:
            with Scale(2):
                raise ValueError("through")
        except ValueError:
            return x - 1
        return x
    check(f, r(3))


def test_enable_grad_with_grad_inputs_is_not_captured():
    lin = nn.Linear(3, 3)

    def f(x):
        with torch.enable_grad():
            return lin(x)
    c = ember.compile(f)
    with torch.no_grad():
        out = c(r(2, 3))
    assert out.requires_grad
    assert torch.is_grad_enabled()


def test_is_compiling_is_true_inside():
    def f(x):
        if torch.compiler.is_compiling():
            return x + 1
        return x - 1
    c = ember.compile(f)
    x = r(3)
    torch.testing.assert_close(c(x), x + 1)
    torch.testing.assert_close(f(x), x - 1)


# --- Objects of the program's classes --------------------------------------------------------

@dataclasses.dataclass
class Output:
    logits: torch.Tensor = None
    hidden: torch.Tensor = None

    def __post_init__(self):
        self.n_fields = len(dataclasses.fields(self))


class ModelOutputLike(OrderedDict):
    """Like transformers' ModelOutput: items and attributes kept in step."""

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        super().__setattr__(key, value)

    def __setattr__(self, name, value):
        if value is not None:
            super().__setitem__(name, value)
        super().__setattr__(name, value)

    def __getitem__(self, k):
        if isinstance(k, str):
            return dict(self.items())[k]
        return tuple(self.values())[k]


@dataclasses.dataclass
class DataOutput(ModelOutputLike):
    last: torch.Tensor = None
    extra: torch.Tensor = None

    def __post_init__(self):
        for field in dataclasses.fields(self):
            v = getattr(self, field.name)
            if v is not None:
                self[field.name] = v


def test_dataclass_constructed_and_returned():
    def f(x):
        return Output(x + 1, hidden=x * 2)
    check(f, r(3))


def test_plain_class_with_method():
    class Acc:
        def __init__(self, start):
            self.total = start
            self.count = 0

        def add(self, v):
            self.total = self.total + v
            self.count += 1
            return self

    def f(x):
        a = Acc(x)
        a.add(x).add(x * 2)
        return a.total * a.count
    check(f, r(3))


def test_ordered_dict_subclass_output():
    def f(x):
        out = DataOutput(last=x.relu(), extra=None)
        return out, out[0] * 2, out["last"] + 1
    c = check(f, r(4))
    out, _, _ = c(r(4))
    assert list(out.keys()) == ["last"] and out.extra is None


def test_shared_objects_are_built_once():
    class Box:
        def __init__(self, v):
            self.v = v

    def f(x):
        b = Box(x + 1)
        items = [x * 2]
        return b, b, items, {"same": items}
    c = check(f, r(3))
    a, b, items, d = c(r(3))
    assert a is b and d["same"] is items


def test_nested_output_held_as_attribute_and_item():
    """Like CLIP's output: a nested ModelOutput is both an attribute and an item."""
    def f(x):
        inner = DataOutput(last=x + 1)
        return DataOutput(last=x * 2, extra=None), inner, ModelOutputLike(inner=inner)
    c = check(f, r(3))
    _, inner, outer = c(r(3))
    assert outer["inner"] is inner and outer.inner is inner


def test_shared_list_across_a_graph_break():
    def f(x):
        acc = [x + 1]
        alias = acc
        print("break")
        alias.append(x * 2)
        return acc
    c = ember.compile(f)
    x = r(3)
    out = c(x)
    assert len(out) == 2
    torch.testing.assert_close(out[1], x * 2)


def test_star_call_with_a_size():
    def f(x):
        return x.new_zeros(*x.shape) + x.view(*x.size())
    check(f, r(2, 3))


class Registry(Mapping):
    table = {"sdpa": 1, "eager": 2}

    def __init__(self):
        self.local = {}

    def __getitem__(self, k):
        if k in self.local:
            return self.local[k]
        return self.table[k]

    def __iter__(self):
        return iter({**self.table, **self.local})

    def __len__(self):
        return len(self.table) + len(self.local)


REGISTRY = Registry()


def test_in_and_get_on_a_mapping_class():
    def f(x, name):
        if name not in REGISTRY:
            raise KeyError(name)
        return x * REGISTRY.get(name, 10) + REGISTRY.get("missing", 10)
    check(f, r(3), "sdpa")


class Gate(nn.Module):
    """A module whose __call__ is the program's and ends in super().__call__."""
    flag = False

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def __call__(self, *args, **kwargs):
        if self.flag and self.training:
            kwargs["scale"] = 0.0
        return super().__call__(*args, **kwargs)

    def forward(self, x, scale=1.0):
        return self.lin(x) * scale


def test_module_with_call_override():
    m = Gate().eval()

    def f(x):
        return m(x, scale=2.0) + m(x)
    with torch.no_grad():
        check(f, r(2, 4))


# --- Stores to objects from outside the frame ----------------------------------------------

class State:
    def __init__(self):
        self.value = None
        self.calls = 0


STATE = State()


def test_store_replayed_after_graph():
    def f(x):
        STATE.value = x * 2
        STATE.last = {"n": 1}
        return x + 1
    c = ember.compile(f)
    ember.metrics.reset()
    for _ in range(3):
        STATE.value = None
        x = r(3)
        torch.testing.assert_close(c(x), x + 1)
        torch.testing.assert_close(STATE.value, x * 2)
        assert STATE.last == {"n": 1}
    expect_frames(1, 0)


def test_read_after_store_sees_stored_value():
    def f(x):
        STATE.value = x + 1
        return STATE.value * 2
    check(f, r(3))


def test_set_then_reset_like_a_context_variable():
    class Var:
        def __init__(self):
            self.global_var = None
            self.compiling = False

        def set(self, v):
            self.global_var = v
            self.compiling = True

        def reset(self):
            self.global_var = None
            self.compiling = False

    var = Var()

    def f(x):
        var.set({"a": []})
        try:
            y = x * 2
        finally:
            var.reset()
        return y
    check(f, r(3))
    assert var.global_var is None and var.compiling is False


def test_store_undone_when_capture_fails():
    def f(x):
        STATE.calls = 41
        print("unsupported")  # the capture stops here, the store is undone, then run eagerly
        return x + STATE.calls
    STATE.calls = 0
    c = ember.compile(f)
    x = r(3)
    torch.testing.assert_close(c(x), x + 41)
    assert STATE.calls == 41


# --- copy.deepcopy of plain data, setattr / delattr ---------------------------------------

class Config:
    def __init__(self):
        self.hidden = 4
        self.layers = ["full", "sliding"]
        self.extra = {"scale": 2.0}


CONFIG = Config()


def test_deepcopy_of_an_outside_config_is_guarded_by_its_state():
    def f(x):
        cfg = copy.deepcopy(CONFIG)
        cfg.extra["scale"] = 3.0  # the copy is the frame's: CONFIG is untouched
        setattr(cfg, "renamed", cfg.hidden)
        delattr(cfg, "hidden")
        return x * cfg.renamed * cfg.extra["scale"] * len(cfg.layers)
    c = check(f, r(3))
    assert CONFIG.extra["scale"] == 2.0 and CONFIG.hidden == 4
    x = r(3)
    CONFIG.layers.append("full")  # deep in the state: the guard sees it
    try:
        torch.testing.assert_close(c(x), f(x))
    finally:
        CONFIG.layers.pop()


def test_deepcopy_of_tensors_is_not_captured():
    def f(x):
        d = copy.deepcopy({"t": x})
        return d["t"] + 1
    c = ember.compile(f)
    ember.metrics.reset()
    x = r(3)
    torch.testing.assert_close(c(x), x + 1)
    expect_frames(0, 1)


class Layer(abc.ABC):
    """An ABC (empty __slots__) with a program __init__: constructed in the frame."""

    def __init__(self, **kwargs):
        self.keys = None
        self.kwargs = kwargs

    @abc.abstractmethod
    def update(self, k): ...


class CatLayer(Layer):
    def update(self, k):
        self.keys = k if self.keys is None else torch.cat([self.keys, k])
        return self.keys


def test_abc_subclass_constructed_and_updated():
    def f(x):
        layer = CatLayer(window=3)
        layer.update(x)
        return layer.update(x * 2), layer
    check(f, r(2))


def wrap_setattr(cls):
    """A decorator whose __setattr__ closes over the original (like huggingface_hub's strict
    dataclasses)."""
    original_setattr = cls.__setattr__

    def __setattr__(self, name, value):
        original_setattr(self, name, value)
    cls.__setattr__ = __setattr__
    return cls


@wrap_setattr
class Strict:
    def __init__(self, v):
        self.v = v


def test_setattr_of_a_class_decorator_closure():
    def f(x):
        s = Strict(x + 1)
        s.w = 2
        return s.v * s.w
    check(f, r(3))


class Collected(NamedTuple):
    x_j: torch.Tensor
    index: torch.Tensor
    size: int = 3


def test_namedtuple_constructed_read_and_returned():
    def f(x):
        args = Collected(x + 1, x * 2)
        a, b, n = args
        return Collected(args.x_j * n, b, size=n + 1), a
    c = check(f, r(3))
    out, _ = c(r(3))
    assert type(out) is Collected and out.size == 4


def test_inference_mode_block_is_captured_as_no_grad():
    def f(x):
        with torch.inference_mode():
            y = x * 2
        return y + 1
    check(f, r(3))
    assert torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
