"""User functions called from the compiled function (inlined into one graph), recursion, methods
of user classes (their attributes are guarded inputs), and globals read by the function."""

from __future__ import annotations

import pytest
import torch

from capture_check import check, expect_frames, same

import ember


def r(*shape):
    return torch.randn(*shape)


def helper_affine(x, w, b):
    return x * w + b


def helper_norm(x):
    return (x - x.mean()) / (x.std() + 1e-5)


def helper_calls_helper(x):
    return helper_norm(helper_affine(x, 2.0, 1.0)).relu()


@torch.jit.script
def scripted_bucket(pos, bucket: int):
    sign = torch.sign(pos)
    return torch.where(pos.abs() < bucket, pos, sign * (bucket + torch.log1p(pos.abs() - bucket)))


def recurse(x, depth):
    if depth == 0:
        return x
    return recurse(x * 2 + depth, depth - 1)


def fact(n):
    return 1 if n <= 1 else n * fact(n - 1)


SCALE = 2
OFFSET = torch.ones(3)
TABLE = {"a": 3, "b": 4}
CONFIG_FLAG = True




class Affine:
    """A plain Python object holding tensors and ints."""

    def __init__(self, w, b, k):
        self.w = w
        self.b = b
        self.k = k

    def apply(self, x):
        return x * self.w + self.b * self.k

    def twice(self, x):
        return self.apply(self.apply(x))

    @property
    def scale(self):
        return self.k * 10

    @staticmethod
    def static_op(x):
        return x - 1

    @classmethod
    def class_op(cls, x):
        return x + len(cls.__name__)


class Derived(Affine):
    def apply(self, x):
        return super().apply(x) * 2


def test_helper_functions_inlined():
    def f(x):
        return helper_affine(x, 3.0, 0.5) + helper_norm(x)
    check(f, r(8), atol=1e-4)


def test_torch_jit_script_function_inlined():
    # A torch.jit.script function is inlined from its Python original (as torch.compile does):
    # one graph, no break (DeBERTa-v2 scripts its position buckets).
    def f(x):
        return scripted_bucket(x * 4, 2) + 1
    check(f, r(16), captured=1, eager=0)
    assert ember.metrics.snapshot().get("graph_breaks", 0) == 0


def test_helper_calling_helper():
    def f(x):
        return helper_calls_helper(x) * 2
    check(f, r(8), atol=1e-4)


def test_compile_module_level_function_directly():
    check(helper_calls_helper, r(8), atol=1e-4)


def test_recursion_depth_3():
    def f(x):
        return recurse(x, 3)
    check(f, r(3))


def test_recursion_on_python_ints():
    def f(x):
        return x * fact(4)
    check(f, r(3))


def test_helper_returning_tuple():
    def stats(x):
        return x.mean(), x.amax(), x.shape[0]

    def f(x):
        m, mx, n = stats(x)
        return (x - m) / mx * n
    check(f, r(5))


def test_method_of_user_object():
    def f(obj, x):
        return obj.apply(x)
    check(f, Affine(r(3), r(3), 2), r(3))


def test_method_calling_method_static_class():
    def f(obj, x):
        return obj.twice(x) + Affine.static_op(x) + obj.class_op(x)
    check(f, Affine(r(3), r(3), 2), r(3))


def test_property_of_user_object():
    def f(obj, x):
        return x + obj.scale
    check(f, Affine(r(3), r(3), 2), r(3))


def test_property_then_tensor_attribute_of_user_object():
    def f(obj, x):
        return obj.scale + x * obj.w
    check(f, Affine(r(3), r(3), 2), r(3))


def test_bound_method_compiled_directly():
    obj = Affine(r(3), r(3), 2)
    check(obj.twice, r(3))


def test_super_in_user_class():
    def f(obj, x):
        return obj.apply(x)
    check(f, Derived(r(3), r(3), 3), r(3))


def test_user_object_int_attribute_change_recompiles():
    obj = Affine(r(3), r(3), 2)

    def f(x):
        return obj.apply(x)
    c = ember.compile(f)
    ember.metrics.reset()
    x = r(3)
    same(c, f, x)
    obj.k = 5
    same(c, f, x)
    expect_frames(2, 0)


def test_user_object_tensor_attribute_mutated_in_place_is_seen():
    obj = Affine(r(3), r(3), 2)

    def f(x):
        return obj.apply(x)
    c = ember.compile(f)
    ember.metrics.reset()
    x = r(3)
    same(c, f, x)
    obj.w.mul_(10)
    same(c, f, x)
    expect_frames(1, 0)


def test_user_object_tensor_attribute_rebound():
    obj = Affine(r(3), r(3), 2)

    def f(x):
        return obj.apply(x)
    c = ember.compile(f)
    ember.metrics.reset()
    x = r(3)
    same(c, f, x)
    obj.w = r(3)
    same(c, f, x)
    obj.w = r(4, 3)
    same(c, f, x)
    assert ember.metrics.snapshot()["eager_frames"] == 0


def test_global_int():
    def f(x):
        return x * SCALE
    check(f, r(3))


def test_global_tensor():
    def f(x):
        return x + OFFSET
    check(f, r(3))


def test_global_tensor_and_int():
    def f(x):
        return x * SCALE + OFFSET
    check(f, r(3))


def test_global_int_changed_recompiles():
    global SCALE

    def f(x):
        return x * SCALE
    c = ember.compile(f)
    ember.metrics.reset()
    x = r(3)
    try:
        same(c, f, x)
        SCALE = 7
        out = same(c, f, x)
        torch.testing.assert_close(out, x * 7)
        SCALE = 2
        same(c, f, x)
    finally:
        SCALE = 2
    expect_frames(2, 0)


def test_global_tensor_mutated_in_place_is_seen():
    def f(x):
        return x + OFFSET
    c = ember.compile(f)
    ember.metrics.reset()
    x = r(3)
    try:
        same(c, f, x)
        OFFSET.add_(5)
        out = same(c, f, x)
        torch.testing.assert_close(out, x + 6)
    finally:
        OFFSET.fill_(1)
    expect_frames(1, 0)


def test_global_tensor_rebound():
    global OFFSET

    def f(x):
        return x + OFFSET
    c = ember.compile(f)
    ember.metrics.reset()
    x = r(3)
    old = OFFSET
    try:
        same(c, f, x)
        OFFSET = torch.full((3,), -2.0)
        out = same(c, f, x)
        torch.testing.assert_close(out, x - 2)
    finally:
        OFFSET = old
    assert ember.metrics.snapshot()["eager_frames"] == 0


def test_global_dict_value_changed():
    def f(x):
        return x * TABLE["a"]
    c = ember.compile(f)
    ember.metrics.reset()
    x = r(3)
    try:
        same(c, f, x)
        TABLE["a"] = 9
        out = same(c, f, x)
        torch.testing.assert_close(out, x * 9)
    finally:
        TABLE["a"] = 3
    expect_frames(2, 0)


def test_global_bool_flag_changed():
    global CONFIG_FLAG

    def f(x):
        return x.relu() if CONFIG_FLAG else x.neg()
    c = ember.compile(f)
    ember.metrics.reset()
    x = r(4)
    try:
        same(c, f, x)
        CONFIG_FLAG = False
        same(c, f, x)
    finally:
        CONFIG_FLAG = True
    expect_frames(2, 0)


def test_helper_defined_in_frame_and_module_helper_mix():
    def f(x):
        def local(v):
            return helper_affine(v, 2, 1)
        return local(x) + helper_norm(local(x))
    check(f, r(6), atol=1e-4)


def test_same_helper_called_with_different_arg_types():
    def add(a, b):
        return a + b

    def f(x):
        return add(x, 1), add(2, 3), add(x, x), add("a", "b")
    check(f, r(3))


def test_callee_compiled_separately_also_works():
    """Compiling both a function and its helper: each compiled callable is correct."""
    def g(x):
        return x.sin() * 2

    def f(x):
        return g(x) + 1
    cg = ember.compile(g)
    x = r(3)
    check(f, x)
    torch.testing.assert_close(cg(x), g(x))


def test_object_getattribute_is_an_attribute_read():
    """object.__getattribute__(obj, name) and str(a type) read state like getattr does."""
    class Config:
        def __init__(self):
            self.scale = 3

    cfg = Config()

    def f(x, c):
        n = object.__getattribute__(c, "scale")
        tag = str(type(c))
        return x * n if tag else x

    check(f, torch.randn(4), cfg)
