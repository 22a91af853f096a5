"""The matrix-product template of mode="max-autotune" (codegen/triton/triton_matmul.h): run in
Triton's interpreter on the CPU (compiled on a GPU) against torch's matmul, over dtypes, batches,
transposed operands, a broadcast bias, sizes that no tile divides, and every configuration."""

from __future__ import annotations

import pytest
import torch

import ember._C as C
from ember import _triton
from triton_check import DEVICE

NAMES = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}


def _strides(t: torch.Tensor) -> list[int]:
    s = list(t.stride())
    return s if t.dim() == 3 else [0] + s


def run(a, b, bias=None, out_dtype=None, configs=None):
    """C = a @ b (+ bias) through the template, under each of its configurations (or the first
    `configs`); returns the results."""
    a, b = a.to(DEVICE), b.to(DEVICE)
    batch = a.shape[0] if a.dim() == 3 else 1
    m, k = a.shape[-2:]
    n = b.shape[-1]
    out_dtype = out_dtype or a.dtype
    c = torch.empty(*(a.shape[:-1]), n, dtype=out_dtype, device=DEVICE)
    kw = {}
    if bias is not None:
        bias = bias.to(DEVICE)
        full = bias.expand(*c.shape)
        kw = {"bias_dtype": NAMES[bias.dtype], "bias_strides": _strides(full)}
    t = C.triton_matmul([batch, m, n, k], NAMES[a.dtype], NAMES[out_dtype], _strides(a),
                        _strides(b), _strides(c), allow_tf32=False, **kw)
    fn = _triton.kernel_function(t["source"], t["name"])
    outs = []
    for cfg in t["configs"][:configs]:
        c.fill_(float("nan"))
        args = [a, b] + ([bias] if bias is not None else []) + [c]
        fn[cfg["grid"]](*args, BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"],
                        BLOCK_K=cfg["BLOCK_K"], GROUP_M=cfg["GROUP_M"],
                        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
        outs.append(c.clone().cpu())
    return outs


def want(a, b, bias=None, out_dtype=None):
    r = a.double() @ b.double()
    if bias is not None:
        r = r + bias.double()
    return r.to(out_dtype or a.dtype)


def test_f32_every_configuration_odd_sizes():
    a, b = torch.randn(70, 45), torch.randn(45, 33)
    for got in run(a, b):
        torch.testing.assert_close(got, want(a, b), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_operands_accumulate_in_f32_and_round_once(dtype):
    a, b = torch.randn(64, 96).to(dtype), torch.randn(96, 48).to(dtype)
    bias = torch.randn(48).to(dtype)
    for got in run(a, b, bias, configs=2):
        torch.testing.assert_close(got, want(a, b, bias), atol=2e-2, rtol=1e-2)
    got = run(a, b, out_dtype=torch.float32, configs=1)[0]  # an f32 result of half operands
    torch.testing.assert_close(got, want(a, b, out_dtype=torch.float32), atol=1e-4, rtol=1e-4)


def test_batched_transposed_and_strided_operands():
    a = torch.randn(3, 40, 50).transpose(1, 2)          # [3, 50, 40], column-major rows
    b = torch.randn(3, 24, 40).transpose(1, 2)          # [3, 40, 24]
    bias = torch.randn(3, 1, 24)                          # broadcast along rows
    for got in run(a, b, bias, configs=3):
        torch.testing.assert_close(got, want(a, b, bias), atol=1e-4, rtol=1e-4)
    w, x, bias = torch.randn(32, 64), torch.randn(17, 64), torch.randn(32)  # x @ w.t() + bias
    got = run(x, w.t(), bias, configs=1)[0]
    torch.testing.assert_close(got, want(x, w.t(), bias), atol=1e-4, rtol=1e-4)


def test_unsupported_says_why():
    with pytest.raises(Exception, match="a result dtype"):
        C.triton_matmul([1, 4, 4, 4], "f32", "bf16", [0, 4, 1], [0, 4, 1], [0, 4, 1])
    with pytest.raises(Exception, match="expected f32, bf16 or f16"):
        C.triton_matmul([1, 4, 4, 4], "f64", "f64", [0, 4, 1], [0, 4, 1], [0, 4, 1])
