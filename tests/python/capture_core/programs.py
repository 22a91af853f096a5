"""Small programs for the bytecode tests: the golden-text cases and the round-trip run checks.

Line numbers matter for the golden files (tests/python/capture_core/golden/): append new cases at
the end and regenerate with EMBER_ACCEPT_GOLDEN=1.
"""

from __future__ import annotations

import contextlib


def add(a, b):
    return a + b


def loop_sum(xs):
    total = 0
    for x in xs:
        if x % 2 == 0:
            continue
        total += x
    while total > 100:
        total -= 7
    return total


def try_except_finally(x):
    log = []
    try:
        log.append(1 / x)
    except ZeroDivisionError as e:
        log.append(type(e).__name__)
    else:
        log.append("else")
    finally:
        log.append("finally")
    return log


def with_block(n):
    out = []
    with contextlib.suppress(KeyError):
        out.append(n)
        if n > 1:
            raise KeyError(n)
        out.append(-n)
    return out


def calls(s, sep=","):
    parts = s.split(sep)
    joined = "-".join(p.strip() for p in parts)
    return sorted(parts, key=len, reverse=True), dict(a=1, b=joined), max(parts, default=None)


def closure(k):
    scale = k * 2

    def inner(v, *, offset=0):
        return v * scale + offset + k

    return [inner(i, offset=1) for i in range(3)]


def generator(n):
    for i in range(n):
        received = yield i * i
        if received is not None:
            yield received
    return n


def comprehensions(xs):
    evens = [x for x in xs if x % 2 == 0]
    squares = {x: x * x for x in evens}
    unique = {x % 3 for x in xs}
    return evens, squares, unique, sum(x for x in xs)


def compare_chain(a, b, c):
    if a < b <= c and a is not b and a not in (b, c):
        return "ordered"
    return not (a == b or b != c)


def nested_try(xs):
    out = 0
    for x in xs:
        try:
            try:
                out += 10 // x
            finally:
                out += 1
        except ZeroDivisionError:
            out -= 100
            break
    return out


def star_calls(*args, **kwargs):
    def f(*a, **k):
        return len(a), sorted(k)

    return f(*args, 1, **kwargs, z=2), f(*[*args, 3])


def fstrings(name, value):
    return f"{name!r}: {value:>8.3f} {value!s}"


def slices(xs):
    ys = xs[1:-1]
    ys[0:1] = [99]
    del ys[-1]
    return ys, xs[::2]


class Point:
    def __init__(self, x, y):
        self.x = x
        self.y = y

    def norm2(self):
        return self.x * self.x + self.y * self.y

    def scaled(self, s):
        return Point(self.x * s, self.y * s).norm2()


class Child(Point):
    def norm2(self):
        return super().norm2() + 1


def method_calls(n):
    p = Point(n, n + 1)
    c = Child(1, 2)
    return p.norm2(), p.scaled(2), c.norm2(), "abc".upper().lower()


def unpacking(pairs):
    a, *rest = pairs
    (x, y), z = a, rest
    return x + y, z


async def coroutine(n):
    return n + 1


def yield_from(n):
    yield from range(n)
    return (yield)


def many_locals(n):
    # Enough constants and names to need EXTENDED_ARG on some opargs.
    t = 0
    for i in range(n):
        t += (i * 3 + 1) % 7
    return t


GOLDEN_CASES = [
    add,
    loop_sum,
    try_except_finally,
    with_block,
    calls,
    closure,
    generator,
    comprehensions,
    compare_chain,
    Child.norm2,
]
