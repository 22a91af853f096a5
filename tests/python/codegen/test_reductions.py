"""Plain reductions as generated kernels (sum, mean, prod, amax, amin, argmax, argmin, max/min
with indices, any, all, var, std, var_mean, std_mean, logsumexp): differential against eager
(ember.testing.check_model) over dims, keepdim, dtypes, strided / broadcast / size-1 / size-0
inputs, and NaN; one kernel per reduction, asserted by the counters. Reductions are on by default
(EMBER_REDUCTION_KERNELS=0 turns them off)."""

import math

import pytest
import torch

from kernel_check import run


def make(shape, dtype):
    if dtype == torch.bool:
        return torch.rand(shape) > 0.5
    if dtype.is_floating_point:
        return torch.randn(shape).to(dtype)
    return torch.randint(-4, 5, shape).to(dtype)


# (op, call(x, dim, keepdim)); dim None means every dim.
def _sum(x, d, k):
    return x.sum() if d is None else x.sum(d, keepdim=k)


def _mean(x, d, k):
    return x.mean() if d is None else x.mean(d, keepdim=k)


def _prod(x, d, k):
    return x.prod() if d is None else x.prod(d, keepdim=k)


def _amax(x, d, k):
    return x.amax() if d is None else x.amax(d, keepdim=k)


def _amin(x, d, k):
    return x.amin() if d is None else x.amin(d, keepdim=k)


def _argmax(x, d, k):
    return x.argmax() if d is None else x.argmax(d, keepdim=k)


def _argmin(x, d, k):
    return x.argmin() if d is None else x.argmin(d, keepdim=k)


def _any(x, d, k):
    return x.any() if d is None else x.any(d, keepdim=k)


def _all(x, d, k):
    return x.all() if d is None else x.all(d, keepdim=k)


def _var(x, d, k):
    return torch.var(x, d, keepdim=k)


def _std(x, d, k):
    return torch.std(x, d, correction=0, keepdim=k)


def _var_mean(x, d, k):
    return torch.var_mean(x, d, correction=2, keepdim=k)


def _std_mean(x, d, k):
    return torch.std_mean(x, d, keepdim=k)


def _logsumexp(x, d, k):
    return torch.logsumexp(x, tuple(range(x.dim())) if d is None else d, keepdim=k)


FLOAT_OPS = [_sum, _mean, _prod, _amax, _amin, _argmax, _argmin, _any, _all, _var, _std,
             _var_mean, _std_mean, _logsumexp]
SINGLE_DIM_OPS = {_prod, _argmax, _argmin}  # take one int dim (or None)
DIMS = [-1, 0, 1, (0, 2), (-1, -3), None]


def _dims_for(op, dims):
    return [d for d in dims if not (op in SINGLE_DIM_OPS and isinstance(d, tuple))]


CASES = [(op, d) for op in FLOAT_OPS for d in _dims_for(op, DIMS)]


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("op,dim", CASES, ids=[f"{o.__name__[1:]}-{d}" for o, d in CASES])
def test_every_op_over_every_dim_is_one_kernel(op, dim, keepdim):
    x = torch.randn(5, 6, 7)
    if op is _prod:
        x = torch.rand(5, 6, 7) + 0.5
    run(lambda x: op(x, dim, keepdim), x, kernels=1)


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
@pytest.mark.parametrize("op", FLOAT_OPS, ids=lambda o: o.__name__[1:])
def test_float64_and_bfloat16(op, dtype):
    x = make((6, 33), dtype)
    if op is _prod:
        x = (torch.rand(6, 33) + 0.5).to(dtype)
    run(lambda x: (op(x, -1, False), op(x, 0, True)), x, kernels=2)


INT_OPS = [_sum, _prod, _amax, _amin, _argmax, _argmin, _any, _all, _logsumexp]


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.bool])
@pytest.mark.parametrize("op", INT_OPS, ids=lambda o: o.__name__[1:])
def test_integer_and_bool_inputs(op, dtype):
    if dtype == torch.bool and op in (_amax, _amin, _argmax, _argmin, _logsumexp):
        pytest.skip("eager has no such kernel for bool (or ember leaves it to ATen)")
    x = make((7, 12), dtype)
    if op is _prod:
        x = torch.randint(1, 3, (7, 12)).to(dtype)
    run(lambda x: (op(x, 1, False), op(x, None, False)), x, kernels=2)


def test_sum_of_integers_is_int64_and_wraps_like_eager():
    x = torch.full((4, 1000), 2**31 - 1, dtype=torch.int32)
    run(lambda x: (x.sum(1), x.sum(1, dtype=torch.int32), x.prod(1)), x, kernels=1)  # siblings: one pass


def test_dtype_argument():
    x = torch.randn(4, 9)
    run(lambda x: (torch.sum(x, -1, dtype=torch.float64), torch.mean(x, 0, dtype=torch.float64),
                   torch.prod(x.int(), 1, dtype=torch.float32)), x)


LAYOUTS = {
    "transposed": lambda: torch.randn(7, 6, 5).permute(2, 1, 0),
    "sliced": lambda: torch.randn(5, 12, 9)[:, ::2, 1:8],
    "broadcast": lambda: torch.randn(5, 1, 7).expand(5, 6, 7),
    "size1": lambda: torch.randn(5, 1, 7),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("op", [_sum, _mean, _amax, _argmin, _var_mean, _logsumexp],
                         ids=lambda o: o.__name__[1:])
def test_strided_broadcast_and_size1_inputs(op, layout):
    x = LAYOUTS[layout]()
    dims = [-1, 1, 0] if op is _argmin else [-1, 1, (0, 2)]
    # Sums, means and amaxes over one dim list are siblings: keepdim or not, one kernel.
    run(lambda x: tuple(op(x, d, k) for d in dims for k in (False, True)), x,
        kernels=3 if op in (_sum, _mean, _amax) else 6)


def test_any_and_all_over_an_empty_dim_list_reduce_nothing():
    x = torch.randn(3, 4)
    x[0, 1] = 0
    run(lambda x: (torch.any(x, dim=()), torch.all(x, dim=(), keepdim=True), x.sum(dim=())),
        x, kernels=3)


def test_reduction_over_a_size1_dim_only():
    run(lambda x: (x.sum(1), x.amax(1, keepdim=True), x.argmax(1)), torch.randn(4, 1, 3),
        kernels=2)  # the sum and the amax are siblings


@pytest.mark.parametrize("shape,dim", [((0, 7), 1), ((0, 7), 0), ((5, 0), 0), ((3, 0, 4), 1)])
def test_size0_inputs(shape, dim):
    x = torch.randn(shape)

    def f(x):
        out = [x.sum(dim), x.mean(dim), x.prod(dim), torch.var(x, dim), x.any(dim), x.all(dim),
               torch.logsumexp(x, dim)]
        if x.shape[dim] > 0:  # eager cannot take the max of nothing
            out += [x.amax(dim), x.argmax(dim)]
        return tuple(out)

    run(f, x)


def test_zero_dim_input():
    x = torch.tensor(2.5)
    run(lambda x: (x.sum(), x.amax(), x.argmax(), x.mean(), x.sum(0, keepdim=True)), x, kernels=3)


def test_full_reduction_of_a_large_tensor_splits_into_chunks():
    # One row of 300k elements: chunks run in parallel with partials combined in chunk order.
    x = torch.randn(300, 1000)
    total = x.abs().sum().item()
    stats = run(lambda x: (x.sum(), x.amax(), x.argmin(), torch.var_mean(x), x.abs().mean()), x,
                atol=8 * 2**-24 * total)
    # abs is computed inline by the mean (a prologue); the sum and the amax are siblings.
    assert stats["kernels"] == 4


def test_long_rows_sum_in_f32_cascade():
    # Two correct f32 sums (eager's cascade, ember's lanes and cascade) differ by their rounding
    # errors, which grow with sum(|x|): compare against that, not the default atol.
    x = torch.randn(128, 2048)
    atol = 4 * 2**-24 * x.abs().sum(-1).max().item()
    stats = run(lambda x: (x.sum(-1), x.mean(-1) * 2048), x, atol=atol)
    assert stats["kernels"] == 2  # the sum and the mean in one kernel (siblings), the product
    # And ember is as accurate as eager: both within a few ulps of sum(|x|) of the exact sum.
    exact = x.double().sum(-1)
    with torch.no_grad():
        got = torch.compile(lambda x: x.sum(-1), backend="ember")(x)
    err = ((got.double() - exact).abs() / x.abs().sum(-1).double()).max().item()
    assert err < 2**-24


def test_long_column_sums_are_blocked():
    x = torch.randn(20000, 16)
    atol = 4 * 2**-24 * x.abs().sum(0).max().item()
    run(lambda x: (x.sum(0), x.mean(0, keepdim=True)), x, atol=atol, kernels=1)
    exact = x.double().sum(0)
    with torch.no_grad():
        got = torch.compile(lambda x: x.sum(0), backend="ember")(x)
    assert ((got.double() - exact).abs() / x.abs().sum(0).double()).max().item() < 2**-24


@pytest.mark.parametrize("op", [_amax, _amin, _argmax, _argmin, _sum, _logsumexp, _var],
                         ids=lambda o: o.__name__[1:])
def test_nan_propagates_like_eager(op):
    x = torch.randn(4, 70)
    x[1, 3] = float("nan")
    x[2, 69] = float("nan")  # in the tail of the lanes
    x[3, :] = float("nan")
    run(lambda x: (op(x, -1, False), op(x, 0, False), op(x, None, False)), x)


def test_max_and_min_with_indices():
    x = torch.randint(0, 4, (6, 40)).float()  # many ties: the first index wins
    x[2, 5] = float("nan")
    run(lambda x: (torch.max(x, 1), torch.min(x, 0, keepdim=True), torch.max(x), torch.min(x)),
        x, kernels=3)  # the full max and min are siblings


def test_logsumexp_with_infinities():
    x = torch.randn(5, 8)
    x[0, :] = -math.inf
    x[1, 2] = math.inf
    x[2, :] = math.inf
    x[3, 0] = -math.inf
    run(lambda x: torch.logsumexp(x, 1), x, kernels=1)


def test_var_with_large_mean_is_accurate():
    # A two-pass variance in f64: exact where a one-pass or f32 variance loses digits.
    x = torch.randn(8, 500) * 1e-3 + 1e4
    run(lambda x: (torch.var(x, 1), torch.std(x, 0)), x, kernels=2)


def test_correction_larger_than_the_count():
    x = torch.randn(3, 2)
    run(lambda x: (torch.var(x, 1, correction=2), torch.var(x, 1, correction=5),
                   torch.var(x[:, :1], 1)), x)


def test_reductions_off_by_env(monkeypatch):
    monkeypatch.setenv("EMBER_REDUCTION_KERNELS", "0")
    run(lambda x: (x.sum(-1), x.softmax(-1)), torch.randn(4, 9), kernels=0)


def test_reductions_between_pointwise_groups():
    def f(x, w, b):
        y = torch.nn.functional.gelu(x * 2)
        z = torch.nn.functional.layer_norm(y, (32,), w, b)
        return torch.softmax(z + 1, -1).sum(-1, keepdim=True) * x

    run(f, torch.randn(6, 32), torch.randn(32), torch.randn(32),
        kernels=4)  # gelu | layer_norm | add + softmax | sum + mul
