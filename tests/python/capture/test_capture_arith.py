"""Arithmetic on tensors and Python numbers: binary, unary, in-place and comparison operators."""

from __future__ import annotations

import pytest
import torch

from capture_check import check


def r(*shape):
    return torch.randn(*shape)


def test_add_sub_mul_div():
    def f(x, y):
        return x + y, x - y, x * y, x / (y.abs() + 1)
    check(f, r(3, 4), r(3, 4))


def test_floordiv_mod_pow():
    def f(x, y):
        return x // (y.abs() + 1), x % (y.abs() + 1), x.abs() ** y
    check(f, r(3, 4), r(3, 4))


def test_python_number_operands_both_sides():
    def f(x):
        return 2 + x, x - 3.5, 4 * x, x / 2, 1.5 / (x.abs() + 1), 2 ** x, x ** 2, 7 - x
    check(f, r(5))


def test_matmul_operator():
    def f(a, b):
        return a @ b
    check(f, r(3, 4), r(4, 2))


def test_unary_operators():
    def f(x):
        return -x, +x, abs(x)
    check(f, r(4, 3))


def test_bitwise_operators_on_int_tensors():
    def f(a, b):
        return a & b, a | b, a ^ b, ~a, a << 2, a >> 1
    check(f, torch.randint(0, 100, (6,)), torch.randint(0, 100, (6,)))


def test_bool_tensor_logic():
    def f(a, b):
        return a & b, a | b, ~a, a ^ b
    check(f, torch.rand(8) > 0.5, torch.rand(8) > 0.5)


def test_comparisons_produce_tensors():
    def f(x, y):
        return x < y, x <= y, x > y, x >= y, x == y, x != y, x > 0.5
    check(f, r(4, 4), r(4, 4))


def test_comparison_mask_used_in_where():
    def f(x):
        return torch.where(x > 0, x, x * 0.1)
    check(f, r(10))


def test_python_arithmetic_on_ints_feeds_tensor_op():
    def f(x, n):
        k = (n * 3 + 1) // 2 - n % 3
        return x * k + (n ** 2) / 4
    check(f, r(4), 5)


def test_python_float_arithmetic():
    def f(x, a):
        b = a * 2.5 - 1.0 / a
        return x + b, b
    check(f, r(3), 2.0)


def test_mixed_int_and_float_tensors_promote():
    def f(a, b):
        return a + b, a * 2.5, a / 2
    check(f, torch.arange(6), r(6))


def test_broadcasting():
    def f(x, y, z):
        return x + y * z
    check(f, r(3, 1, 4), r(5, 1), r(4))


def test_chained_expression():
    def f(x, y):
        return ((x * y + 1) / (x * x + 1)).sigmoid() * 3 - y
    check(f, r(8), r(8))


def test_inplace_add_on_input_mutates_it():
    def f(x):
        x += 1
        return x * 2
    check(f, r(4, 3))


def test_inplace_operators_on_input():
    def f(x, y):
        x *= 2
        x -= y
        x /= 4
        return x
    check(f, r(5), r(5))


def test_inplace_method_on_input_returns_nothing():
    def f(x):
        x.mul_(3).add_(1)
    check(f, r(2, 3))


def test_inplace_on_local_tensor():
    def f(x):
        y = x * 2
        y += x
        y.clamp_(min=0)
        return y
    check(f, r(6))


def test_inplace_on_slice_of_input():
    def f(x):
        x[:, 0] += 10
        return x.sum()
    check(f, r(3, 4))


def test_setitem_tensor_value_on_input():
    def f(x, v):
        x[1] = v
        return x
    check(f, r(3, 4), r(4))


def test_setitem_scalar_on_input():
    def f(x):
        x[0, 0] = 5.0
        return x
    check(f, r(3, 4))


def test_setitem_on_local_tensor():
    def f(x):
        y = x.clone()
        y[:, 1] = 0.0
        return y
    check(f, r(3, 4))


def test_inplace_int_and_bitwise_ops():
    def f(a, b):
        a |= b
        a <<= 1
        return a
    check(f, torch.randint(0, 50, (5,)), torch.randint(0, 50, (5,)))


def test_inplace_python_int_augassign():
    def f(x, n):
        n += 2
        n *= 3
        return x * n
    check(f, r(3), 4)


def test_reflected_ops_with_bool_and_int():
    def f(x):
        return True + x, 3 - x, 10 // (x.abs() + 1)
    check(f, r(4))


def test_division_by_python_zero_float():
    def f(x):
        return x / 0.0
    check(f, r(4))


def test_integer_tensor_true_division_promotes():
    def f(a, b):
        return a / b, a // b, a % b
    check(f, torch.randint(1, 20, (6,)), torch.randint(1, 5, (6,)))


def test_comparison_chain_of_python_values():
    def f(x, n):
        if 0 < n <= 5:
            return x + n
        return x - n
    check(f, r(3), 3)


def test_not_and_or_on_python_values():
    def f(x, a, b):
        if not a and (b or a):
            return x * 2
        return x * 3
    check(f, r(3), False, True)


def test_scalar_tensor_arithmetic():
    def f(x, s):
        return x * s + s
    check(f, r(3, 3), torch.tensor(2.5))


def test_float64_and_float32_mix():
    def f(a, b):
        return a + b
    check(f, r(4).double(), r(4))


def test_unary_math_functions():
    def f(x):
        return x.exp(), x.sin(), x.cos(), x.tanh(), x.abs().sqrt(), x.abs().add(1).log(), x.neg()
    check(f, r(6))


def test_rounding_and_sign():
    def f(x):
        return x.floor(), x.ceil(), x.round(), x.trunc(), x.sign(), x.frac()
    check(f, r(6) * 5)
