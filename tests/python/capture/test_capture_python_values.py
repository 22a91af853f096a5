"""Python values in a captured frame: constants, tuples, lists, dicts built in the frame,
comprehensions, unpacking, slicing of lists, allowed builtins and f-strings."""

from __future__ import annotations

import pytest
import torch

from capture_check import check


def r(*shape):
    return torch.randn(*shape)


def test_python_constants():
    def f(x):
        a, b, c, d = 3, 2.5, True, None
        return x * a + b, c, d, "s", (1, 2)
    check(f, r(3))


def test_tuple_built_in_frame_and_indexed():
    def f(x, y):
        t = (x, y, x + y)
        return t[2] * t[0], t[-1]
    check(f, r(3), r(3))


def test_list_built_and_mutated_in_frame():
    def f(x):
        out = []
        out.append(x)
        out.append(x * 2)
        out.extend([x + 1, x - 1])
        out.insert(0, x.neg())
        del out[1]
        out[0] = out[0] * 10
        return out
    check(f, r(3))


def test_dict_built_and_read():
    def f(x):
        d = {"a": x, "b": x * 2}
        d["c"] = d["a"] + d["b"]
        return d["c"], d.get("z", 7), "a" in d, len(d)
    check(f, r(3))


def test_dict_methods_items_keys_values():
    def f(x):
        d = {"p": x, "q": x + 1}
        total = 0
        for v in d.values():
            total = total + v
        keys = list(d.keys())
        return total, keys, [k for k, _ in d.items()]
    check(f, r(2))


def test_dict_update_and_pop():
    def f(x):
        d = dict(a=x, b=2)
        d.update({"c": x * 3})
        b = d.pop("b")
        return d, b
    check(f, r(2))


def test_list_comprehension():
    def f(x):
        return [x * i for i in range(3)]
    check(f, r(4))


def test_list_comprehension_with_condition():
    def f(x, n):
        return sum([x * i for i in range(n) if i % 2 == 1])
    check(f, r(4), 6)


def test_dict_comprehension():
    def f(x):
        return {i: x + i for i in range(3)}, {k: x * v for k, v in zip(["a", "b"], [1, 2])}
    check(f, r(2))


def test_nested_comprehension():
    def f(x):
        return [[x * i * j for j in range(2)] for i in range(3)]
    check(f, r(2))


def test_set_of_python_ints():
    def f(x, n):
        s = {1, 2, n}
        return x * len(s), n in s
    check(f, r(2), 2)


def test_generator_expression():
    """A generator expression runs to completion inside the trace; its consumer sees its values."""
    def f(x):
        return sum(x * i for i in range(4))
    check(f, r(3))


def test_sum_of_list_of_tensors():
    def f(x):
        return sum([x * i for i in range(4)])
    check(f, r(3))


def test_dict_items_loop():
    def f(x):
        d = {"a": 1, "b": 2}
        out = {}
        for k, v in d.items():
            out[k] = x * v
        return out
    check(f, r(3))


def test_fstring_on_int():
    def f(x, n):
        return x * n, f"n={n}"
    check(f, r(2), 3)


def test_star_unpacking():
    def f(x):
        a, *b = [x, x * 2, x * 3]
        *c, d = (1, 2, 3)
        return a + b[0] + b[1], c, d
    check(f, r(3))


def test_nested_unpacking():
    def f(x, y):
        (a, b), c = (x, y), x * y
        return a - b + c
    check(f, r(3), r(3))


def test_swap():
    def f(x, y):
        x, y = y, x
        return x - y
    check(f, r(3), r(3))


def test_list_slicing():
    def f(x):
        xs = [x, x + 1, x + 2, x + 3, x + 4]
        return xs[1:3], xs[::2], xs[-2:], xs[::-1][0]
    check(f, r(2))


def test_list_argument_read():
    def f(xs):
        return xs[0] + xs[-1], len(xs)
    check(f, [r(3), r(3), r(3)])


def test_tuple_argument_unpacked():
    def f(pair):
        a, b = pair
        return a * b
    check(f, (r(3), r(3)))


def test_dict_argument_read():
    def f(d):
        return d["x"] * d["scale"], sorted(d.keys())
    check(f, {"x": r(3), "scale": 3})


def test_len_isinstance():
    def f(x, xs):
        n = len(xs)
        if isinstance(xs, list) and isinstance(x, torch.Tensor) and not isinstance(n, float):
            return x * n
        return x
    check(f, r(3), [1, 2, 3])


def test_range_enumerate_zip():
    def f(xs, ws):
        total = 0
        for i, (x, w) in enumerate(zip(xs, ws)):
            total = total + x * w * i
        return total, list(range(2, 8, 3))
    check(f, [r(2), r(2), r(2)], [1, 2, 3])


def test_min_max_abs_on_python_numbers():
    def f(x, a, b):
        return x * max(a, b) + min(a, b, 0) + abs(-a), max([a, b, 7]), min((3, a))
    check(f, r(3), 4, -2)


def test_sum_of_list_of_ints_and_round():
    def f(x, ns):
        return x * sum(ns), round(2.6), int(3.9), float(2), bool(0)
    check(f, r(3), [1, 2, 3])


def test_getattr_hasattr():
    class Holder:
        def __init__(self):
            self.scale = 3
            self.bias = 0.5

    def f(x, h):
        extra = getattr(h, "extra", 1)
        if hasattr(h, "scale"):
            return x * getattr(h, "scale") + h.bias + extra
        return x
    check(f, r(3), Holder())


def test_fstring_on_ints_used_as_dict_key():
    def f(x, n):
        d = {f"layer{i}": x * i for i in range(n)}
        return d[f"layer{n - 1}"], f"n={n}:{n * 2:03d}"
    check(f, r(2), 3)


def test_string_methods_and_concat():
    def f(x, name):
        key = name.upper() + "_" + str(3)
        return x * len(key), key, name.startswith("ab")
    check(f, r(2), "abc")


def test_tuple_concat_and_repeat():
    def f(x):
        t = (1, 2) + (3,)
        l = [0] * 3
        return x * len(t) + len(l), t, l
    check(f, r(2))


def test_sorted_reversed_any_all():
    def f(x, ns):
        return x * sorted(ns)[0], list(reversed(ns)), any([n > 2 for n in ns]), all([n > 0 for n in ns])
    check(f, r(2), [3, 1, 2])


def test_list_index_count_in():
    def f(x, ns):
        return x * ns.index(5) + ns.count(1), 5 in ns, 9 not in ns
    check(f, r(2), [1, 5, 1])


def test_walrus_and_conditional_expression():
    def f(x, n):
        y = x * (m := n + 1)
        return y if m > 2 else -y
    check(f, r(3), 4)


def test_shape_tuple_arithmetic():
    def f(x):
        shape = x.shape[:-1] + (2, -1)
        return x.reshape(shape)
    check(f, r(3, 8))


def test_divmod_and_pow_builtins():
    def f(x, n):
        q, rem = divmod(n, 3)
        return x * q + rem + pow(2, n)
    check(f, r(2), 7)


def test_type_builtin():
    def f(x, a):
        return x * a, type(a) is int, type(x).__name__
    check(f, r(2), 3)
