"""The cost of a frame past ember.compile's cache-size limit, against eager.

A frame whose guards fail on every call (a recompile storm: a counter read as a Python int, a
new value per call) compiles until its entries reach `ember.config.cache_size_limit`; from then
on it runs its original bytecode. This measures what such a call costs over the same call
without ember (median of interleaved repeats, per call), for a one-op function and for a small
module whose forward reads a per-call counter:

    python scripts/bench_cache_limit.py [--calls 20000] [--repeats 15]

The target (issue: capture that generalizes) is at most 1 us over eager.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import torch

import ember


class Counting(torch.nn.Module):
    """A module whose forward reads a counter that changes on every call."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.lin(x) * self.calls


def per_call(fn, args_of, calls: int) -> float:
    t0 = time.perf_counter()
    for i in range(calls):
        fn(*args_of(i))
    return (time.perf_counter() - t0) / calls


def measure(name: str, eager, compiled, args_of, calls: int, repeats: int) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.no_grad():
            for i in range(ember.config.cache_size_limit + 2):  # reach the limit
                compiled(*args_of(10_000 + i))
            e, c = [], []
            for _ in range(repeats):  # interleaved
                e.append(per_call(eager, args_of, calls))
                c.append(per_call(compiled, args_of, calls))
    e_us, c_us = statistics.median(e) * 1e6, statistics.median(c) * 1e6
    return {"case": name, "eager_us": e_us, "past_limit_us": c_us, "over_us": c_us - e_us}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=15)
    a = ap.parse_args()
    torch.set_num_threads(1)
    x = torch.randn(8)

    def f(x, n):
        return x * 2 + n

    rows = [measure("function f(x, n), a new int n per call", f, ember.compile(f),
                    lambda i: (x, i), a.calls, a.repeats)]
    m = Counting().eval()
    xm = torch.randn(2, 8)
    rows.append(measure("nn.Module reading a per-call counter", m, ember.compile(m),
                        lambda i: (xm,), a.calls // 4, a.repeats))
    print(f"torch {torch.__version__}; cache_size_limit {ember.config.cache_size_limit}")
    print(f"{'case':45s} {'eager us':>9s} {'past limit us':>14s} {'over eager us':>14s}")
    for r in rows:
        print(f"{r['case']:45s} {r['eager_us']:9.2f} {r['past_limit_us']:14.2f} "
              f"{r['over_us']:14.2f}")


if __name__ == "__main__":
    main()
