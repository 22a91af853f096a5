"""Derives the polynomial coefficients of `ember_erf` (src/codegen/cpp/cpp_prelude.h) and prints
them as C++ hex literals. Needs mpmath (50-digit arithmetic).

    python scripts/gen_erf_coefficients.py

erf(a), a = |x|, is computed in two pieces:
  - a <= 1: erf(a) = a * P(z), z = a^2, P the Chebyshev interpolant of erf(sqrt(z)) / sqrt(z) on
    [0, 1] (P(0) = 2 / sqrt(pi));
  - 1 < a < A: erf(a) = 1 - exp(-a^2) * t * Q(u), t = 1 / a, u the affine map of [1 / A, 1] onto
    [-1, 1], Q the Chebyshev interpolant of erfc(1 / t) exp(1 / t^2) / t (smooth in t: erfc times
    exp(a^2) is entire, and in 1 / a it is nearly linear); beyond A, erf(a) rounds to 1.
A is 4 for f32 and 6 for f64. Each interpolant is taken at the Chebyshev nodes of its degree and
written in the monomial basis of its [-1, 1] variable (z is mapped too), for Horner evaluation.
The printed maximum relative errors are those of the polynomials with coefficients rounded to the
type.
"""

from __future__ import annotations

import struct

import mpmath as mp

mp.mp.dps = 50


def interpolant(f, lo, hi, degree):
    """Monomial coefficients in u in [-1, 1] (x = mid + half * u) of the Chebyshev interpolant."""
    n = degree + 1
    nodes = [mp.cos(mp.pi * (k + mp.mpf(1) / 2) / n) for k in range(n)]
    mid, half = (hi + lo) / 2, (hi - lo) / 2
    a = mp.matrix([[u**j for j in range(n)] for u in nodes])
    return list(mp.lu_solve(a, mp.matrix([f(mid + half * u) for u in nodes])))


def to_f32(v):
    return mp.mpf(struct.unpack("f", struct.pack("f", float(v)))[0])


def to_f64(v):
    return mp.mpf(float(v))


def max_rel_error(f, lo, hi, coeffs, rnd, samples=4000):
    mid, half = (hi + lo) / 2, (hi - lo) / 2
    worst = mp.mpf(0)
    rounded = [rnd(c) for c in coeffs]
    for i in range(samples + 1):
        x = lo + (hi - lo) * i / samples
        p = mp.mpf(0)
        for c in reversed(rounded):
            p = p * ((x - mid) / half) + c
        worst = max(worst, abs(p / f(x) - 1))
    return worst


def small(z):
    if z == 0:
        return 2 / mp.sqrt(mp.pi)
    return mp.erf(mp.sqrt(z)) / mp.sqrt(z)


def large(t):
    a = 1 / t
    return mp.erfc(a) * mp.exp(a * a) / t


def hex_literal(v, f32):
    return float(v).hex() + ("f" if f32 else "")


def main():
    for name, f32, small_deg, cutoff, large_deg in (("f32", True, 7, 4, 9), ("f64", False, 15, 6, 26)):
        rnd = to_f32 if f32 else to_f64
        p = interpolant(small, mp.mpf(0), mp.mpf(1), small_deg)
        q = interpolant(large, mp.mpf(1) / cutoff, mp.mpf(1), large_deg)
        print(f"// {name}: P on z in [0, 1] (u = 2 z - 1), max rel error "
              f"{float(max_rel_error(small, mp.mpf(0), mp.mpf(1), p, rnd)):.2e}")
        print("  " + ", ".join(hex_literal(c, f32) for c in p))
        lo = mp.mpf(1) / cutoff
        print(f"// {name}: Q on t in [1/{cutoff}, 1] (u = (t - {float((1 + lo) / 2)!r}) / "
              f"{float((1 - lo) / 2)!r}), max rel error "
              f"{float(max_rel_error(large, lo, mp.mpf(1), q, rnd)):.2e}")
        print("  " + ", ".join(hex_literal(c, f32) for c in q))


if __name__ == "__main__":
    main()
