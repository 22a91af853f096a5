"""Library code the capture follows instead of breaking the graph: the constructs transformers,
huggingface_hub and the standard library use inside forward passes, each as a class of program.
Each runs compiled whole (one frame, no break) and matches eager."""

from __future__ import annotations

import collections
import dataclasses
import functools
import typing

import numpy as np
import torch

from capture_check import check, expect_frames, same

import ember


def r(*shape):
    return torch.randn(*shape)


@functools.lru_cache
def is_feature_available(name: str) -> bool:
    import importlib.util
    return importlib.util.find_spec(name) is not None


@functools.lru_cache(maxsize=None)
def scale_of(x: torch.Tensor) -> torch.Tensor:
    return x * 3


def test_lru_cache_of_values_runs_for_real():
    # The cached result for those values is the result (transformers' is_*_available checks,
    # which call importlib): no graph break.
    def f(x):
        return x * 2 if is_feature_available("numpy") else x
    check(f, r(3))


def test_lru_cache_of_tensors_is_inlined():
    def f(x):
        return scale_of(x) + 1
    check(f, r(3))


class Cached:
    @functools.lru_cache
    def factor(self, k: int) -> int:
        return k * 2


def test_lru_cached_method():
    obj = Cached()

    def f(x):
        return x * obj.factor(3)
    check(f, r(3))


def test_functools_reduce_calls_its_function():
    def f(x):
        n = functools.reduce(lambda a, b: a * b, x.shape)
        return x.reshape(n) * functools.reduce(lambda a, b: a + b, [1, 2, 3], 10)
    check(f, r(2, 3))


def test_partial_with_keywords_called_with_keywords():
    def act(x, *, alpha=1.0, beta=0.0):
        return x * alpha + beta
    g = functools.partial(act, alpha=2.0, beta=1.0)

    def f(x):
        return g(x, beta=5.0) + g(x)
    check(f, r(3))


def test_yield_from_in_a_generator():
    def walk(xs):
        yield from xs
        yield from (x * 2 for x in xs)

    def f(x):
        return sum(walk([x, x + 1]))
    check(f, r(3))


def test_module_parameters_in_forward():
    # nn.Module.parameters() is generators with `yield from` (named_modules); transformers'
    # `dtype` property walks them.
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)

        def forward(self, x):
            dtype = next(p.dtype for p in self.parameters() if p.is_floating_point())
            return self.lin(x.to(dtype))

    m = M()
    with torch.no_grad():
        check(m, r(2, 3))


def test_user_dict():
    def f(x):
        d = collections.UserDict()
        d["a"] = x * 2
        if "a" in d:
            d["b"] = d["a"] + 1
        return d["b"] + len(d)
    check(f, r(3))


class Output(collections.OrderedDict):
    """Like transformers' ModelOutput: an OrderedDict subclass."""


def test_unpacking_a_dict_subclass_as_keyword_arguments():
    def g(a, b):
        return a - b

    def f(x):
        out = Output(a=x * 2, b=x)
        return g(**out)
    check(f, r(3))


def test_items_of_a_dict_subclass_from_outside():
    def f(out):
        return sum(v * 2 for _, v in out.items())
    c = ember.compile(f)
    ember.metrics.reset()
    for _ in range(2):
        same(c, f, Output(a=r(3), b=r(3)))
    expect_frames(1, 0)


def test_store_of_a_plain_attribute_on_a_module():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.shift = 0

        def forward(self, x):
            self.shift = 2
            return x + self.shift

    m = M()
    c = ember.compile(m)
    ember.metrics.reset()
    x = r(3)
    torch.testing.assert_close(c(x), x + 2)
    assert m.shift == 2
    m.shift = 0
    torch.testing.assert_close(c(x), x + 2)
    assert m.shift == 2  # replayed on the later call
    expect_frames(1, 0)


def test_dict_fromkeys():
    def f(x):
        keys = list(dict.fromkeys(["a", "b", "a"]))
        return x * len(keys)
    check(f, r(3))


def test_numpy_scalars_are_values():
    def f(x, k):
        return x * np.sqrt(k) + np.float64(1.5)
    c = ember.compile(f)
    ember.metrics.reset()
    same(c, f, r(3), 4)
    same(c, f, r(3), 4)
    same(c, f, r(3), 9)
    assert ember.metrics.snapshot()["captured_frames"] == 2


@dataclasses.dataclass
class Strict:
    """A dataclass whose __setattr__ validates through a class-level table of closures keyed
    by typing forms (huggingface_hub's strict dataclasses: transformers' configs)."""
    n: int = 1

    def __setattr__(self, name, value):
        for check_fn in type(self).__validators__.get(name, []):
            check_fn(value)
        object.__setattr__(self, name, value)


def _type_checker(field):
    def check_fn(value):
        expected = Strict._checks.get(typing.get_origin(field.type), int)
        if not isinstance(value, expected):
            raise TypeError(field.name)
    return check_fn


Strict.__validators__ = {f.name: [_type_checker(f)] for f in dataclasses.fields(Strict)}
Strict._checks = {typing.Union: object, int: int}


def test_fresh_object_reads_class_attributes_through_its_class():
    # The validators are closures reached through the class of an object the frame made.
    def f(x):
        s = Strict(3)
        s.n = 4
        return x * s.n
    check(f, r(3))


def test_frames_without_tensors_are_left_alone():
    # A helper on plain values called from a frame that runs eagerly is not captured (as
    # Dynamo's has_tensor_in_frame): no graph, no guards, no recompile per value.
    def helper(key):
        return key.upper()

    def f(x):
        try:  # no graph break inside a try block: this frame runs eagerly
            print("", end="")
        except OSError:
            pass
        return x * len(helper("ab") + helper("cde"))

    c = ember.compile(f)
    before = len(ember.capture.records())
    for _ in range(3):
        same(c, f, r(3))
    assert not [rec for rec in ember.capture.records()[before:] if "helper" in rec["code"]]


def test_instance_forward_attribute():
    # timm's FasterNet sets `self.forward = self.forward_slicing` per instance.
    class P(torch.nn.Module):
        def __init__(self, mode):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.forward = self.times_two if mode == "a" else self.minus_one

        def times_two(self, x):
            return self.lin(x) * 2

        def minus_one(self, x):
            return self.lin(x) - 1

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = P("a"), P("b")

        def forward(self, x):
            return self.a(x) + self.b(x)

    with torch.no_grad():
        check(Net(), r(2, 4))


def test_typing_subscript_at_run_time():
    def f(x):
        xs = torch.jit.annotate(typing.List[torch.Tensor], [])
        xs.append(x * 2)
        return xs[0]
    check(f, r(3))


def test_list_made_by_an_operator_is_the_frames():
    def f(x):
        pad = [(0, 0)] * x.ndim
        pad[0] = (1, 1)
        return torch.nn.functional.pad(x, sum(pad[::-1], ()))
    check(f, r(2, 3))


def test_nn_forward_called_on_the_class():
    # SqueezeBERT's LayerNorm: nn.LayerNorm.forward(self, x) on a subclass.
    class ChannelLayerNorm(torch.nn.LayerNorm):
        def forward(self, x):
            return torch.nn.LayerNorm.forward(self, x.transpose(1, 2)).transpose(1, 2)

    m = ChannelLayerNorm(4)
    with torch.no_grad():
        check(m, r(2, 4, 3))
