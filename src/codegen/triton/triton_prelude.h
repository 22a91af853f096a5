/// \file
/// The text every generated Triton module starts with: the imports, and the jit helpers the
/// emitter's kernels call (Python integer division and modulo, the reductions' combine and
/// reduce functions, argmax/argmin's comparison, index range checks). See triton_emitter.h.
#pragma once

namespace ember::codegen {

inline constexpr const char* kTritonPrelude = R"(import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def _ember_floordiv(a, b):
    q = a // b
    return tl.where(((a % b) != 0) & ((a < 0) != (b < 0)), q - 1, q)


@triton.jit
def _ember_mod(a, b):
    r = a % b
    return tl.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)


@triton.jit
def _ember_add(a, b):
    return a + b


@triton.jit
def _ember_mul(a, b):
    return a * b


@triton.jit
def _ember_max(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _ember_min(a, b):
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _ember_or(a, b):
    return a | b


@triton.jit
def _ember_and(a, b):
    return a & b


@triton.jit
def _ember_sum(x):
    return tl.sum(x, 0)


@triton.jit
def _ember_prod(x):
    return tl.reduce(x, 0, _ember_mul)


@triton.jit
def _ember_amax(x):
    return tl.reduce(x, 0, _ember_max)


@triton.jit
def _ember_amin(x):
    return tl.reduce(x, 0, _ember_min)


@triton.jit
def _ember_arg_take(v, i, cv, ci, larger: tl.constexpr):
    # Whether candidate (cv, ci) beats (v, i): NaN is the best value, then the larger (smaller
    # for argmin), and between equal values the lower index.
    vn = v != v
    cn = cv != cv
    better = (cv > v) if larger else (cv < v)
    return (cn & (vn == 0)) | ((cn == vn) & (((cn == 0) & better) | (((cv == v) | cn) & (ci < i))))


@triton.jit
def _ember_argmax_pair(v1, i1, v2, i2):
    take = _ember_arg_take(v1, i1, v2, i2, True)
    return tl.where(take, v2, v1), tl.where(take, i2, i1)


@triton.jit
def _ember_argmin_pair(v1, i1, v2, i2):
    take = _ember_arg_take(v1, i1, v2, i2, False)
    return tl.where(take, v2, v1), tl.where(take, i2, i1)


@triton.jit
def _ember_any(x):
    return tl.max(x.to(tl.int8), 0) != 0


@triton.jit
def _ember_all(x):
    return tl.min(x.to(tl.int8), 0) != 0


@triton.jit
def _ember_sum_rows(x):
    return tl.sum(x, 1, keep_dims=True)


@triton.jit
def _ember_prod_rows(x):
    return tl.reduce(x, 1, _ember_mul, keep_dims=True)


@triton.jit
def _ember_amax_rows(x):
    return tl.reduce(x, 1, _ember_max, keep_dims=True)


@triton.jit
def _ember_amin_rows(x):
    return tl.reduce(x, 1, _ember_min, keep_dims=True)


@triton.jit
def _ember_any_rows(x):
    return tl.max(x.to(tl.int8), 1, keep_dims=True) != 0


@triton.jit
def _ember_all_rows(x):
    return tl.min(x.to(tl.int8), 1, keep_dims=True) != 0


@triton.jit
def _ember_check_index(x, lo, hi):
    tl.device_assert((x >= lo) & (x < hi), "ember: index out of range")
    return x
)";

}  // namespace ember::codegen
