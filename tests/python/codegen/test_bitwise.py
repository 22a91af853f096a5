"""Bitwise ops and shifts of integers and booleans in the pointwise table
(src/sched/pointwise_ops.cpp; loop IR BitAnd/BitOr/BitXor/Shl/Shr): differential against eager,
with kernel counts. Shifts follow eager's CPU kernels for negative and too-large amounts."""

from __future__ import annotations

import pytest
import torch

INT_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]


def ints(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    info = torch.iinfo(dtype)
    return torch.randint(info.min, info.max, shape, generator=g, dtype=torch.int64).to(dtype)


def one_kernel(stats):
    assert stats["kernels"] == 1, stats
    assert stats["extern_steps"] == 0, stats


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_and_or_xor_not_with_broadcast_and_scalars(check, dtype):
    def f(x, y):
        return (x & y) | (x ^ 5), ~x, x | True, torch.bitwise_and(3, y)

    x, y = ints((4, 5), dtype), ints((5,), dtype, seed=1)
    stats = check.captured(f, (x, y))
    # A loop nest per output shape, the two independent nests one combo kernel (sched/combo.h).
    assert stats["kernels"] == 1, stats
    assert stats["extern_steps"] == 0, stats


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_shifts_of_every_amount(check, dtype):
    bits = torch.iinfo(dtype).bits

    def f(x, s):
        return x << s, x >> s, torch.bitwise_left_shift(x, s), torch.bitwise_right_shift(x, s)

    # Every value against every amount, negative and too large included (eager gives 0 or the
    # sign fill there).
    lo = -3 if dtype != torch.uint8 else 0
    amounts = torch.arange(lo, bits + 3, dtype=torch.int64).to(dtype)
    x = torch.cat([ints((16,), dtype), torch.tensor([0, 1], dtype=dtype)])
    xs = x[:, None].expand(-1, len(amounts)).contiguous()
    ss = amounts[None, :].expand(len(x), -1).contiguous()
    one_kernel(check.captured(f, (xs, ss)))


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_shifts_by_python_numbers(check, dtype):
    def f(x):
        return x << 3, x >> 2, (x >> 1) & 7, 2 << x.clamp(0, 5)

    one_kernel(check.captured(f, (ints((6, 7), dtype),)))


def test_mixed_dtypes_promote_as_eager(check):
    def f(a, b, c, m):
        return a & b, b | c, a ^ c, m & c, (a << b.clamp(0, 3)), m ^ m, ~m

    a = ints((3, 4), torch.uint8)
    b = ints((3, 4), torch.int8, seed=1)
    c = ints((4,), torch.int64, seed=2)
    m = torch.rand(3, 4) > 0.5
    one_kernel(check.captured(f, (a, b, c, m)))


def test_bitwise_ops_fuse_with_integer_arithmetic(check):
    def f(x):
        h = (x * 31) ^ (x >> 3)
        return (h & 1023) + (h << 2)

    one_kernel(check.captured(f, (torch.randint(-1000, 1000, (64, 9)),)))


def test_float_operands_stay_aten_calls():
    with pytest.raises(RuntimeError):
        torch.compile(lambda x: x & 1, backend="ember")(torch.randn(3))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_integer_floor_division_by_a_constant_is_generated(check, dtype):
    """div.Scalar_mode(floor) of an integer tensor by a nonzero constant is FloorDiv in the
    kernel (Python's //: toward negative infinity), not an ATen call."""
    aten = torch.ops.aten

    def f(x):
        return (aten.div.Scalar_mode(x, 3, rounding_mode="floor") * 2,
                aten.div.Scalar_mode(x, -4, rounding_mode="floor") + 1)

    one_kernel(check.captured(f, (torch.arange(-20, 20, dtype=dtype).view(5, 8),)))
