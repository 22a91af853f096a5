"""The per-call cost of a compiled frame's cache hit against eager, on a one-op function: what
the guards (the global-state read included) and the C++ call path cost.

    python scripts/bench_call_overhead.py [--calls 20000] [--rounds 15]

Median per-call time of interleaved rounds, 1 thread, no_grad.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import ember


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=15)
    a = ap.parse_args()
    torch.set_num_threads(1)
    x = torch.randn(4)

    def f(x):
        return x + 1

    c = ember.compile(f)
    with torch.no_grad():
        for _ in range(100):
            c(x)
        e, m = [], []
        for _ in range(a.rounds):
            for fn, out in ((f, e), (c, m)):
                t0 = time.perf_counter()
                for _ in range(a.calls):
                    fn(x)
                out.append((time.perf_counter() - t0) / a.calls * 1e6)
    print(f"torch {torch.__version__}: eager {statistics.median(e):.3f} us, "
          f"ember.compile (cache hit) {statistics.median(m):.3f} us")


if __name__ == "__main__":
    main()
