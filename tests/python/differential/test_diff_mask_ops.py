"""Differential tests: the ops Hugging Face attention masks are built from: rsub (`1.0 - mask`)
and bitwise and/or/xor of booleans, which are pointwise kernels (bitwise ops of integers stay
ATen calls)."""

from __future__ import annotations

import pytest
import torch

PROGRAMS = {
    "rsub_tensor_alpha": (lambda a, b: torch.rsub(a, b, alpha=2), (torch.randn(4, 5), torch.randn(5))),
    "rsub_scalar": (lambda a: 1.0 - a, (torch.randn(4, 5),)),
    "rsub_scalar_bf16": (lambda a: 1.0 - a, (torch.randn(4, 5).bfloat16(),)),
    "rsub_int": (lambda a: 3 - a, (torch.arange(6),)),
    "rsub_int_float_scalar": (lambda a: 2.5 - a, (torch.arange(6),)),
    "hf_extended_mask": (lambda m: (1.0 - m[:, None, None, :].float()) * torch.finfo(torch.float32).min,
                         (torch.tensor([[1, 1, 0], [1, 0, 0]]),)),
    "bool_and": (lambda a, b: (a > 0) & (b > 0), (torch.randn(3, 4), torch.randn(4))),
    "bool_or": (lambda a, b: (a > 0) | (b < 0), (torch.randn(3, 4), torch.randn(4))),
    "bool_xor": (lambda a, b: (a > 0) ^ (b > 0), (torch.randn(3, 4), torch.randn(3, 4))),
    "causal_and_padding": (lambda p: torch.ones(4, 4, dtype=torch.bool).tril() & p[:, None, :].bool(),
                           (torch.tensor([[1, 1, 1, 0]]),)),
    "int_and_stays_aten": (lambda a, b: a & b, (torch.arange(6), torch.arange(6) + 3)),
    "empty": (lambda a: 1.0 - a, (torch.randn(0, 3),)),
}

FUSED = {"rsub_tensor_alpha", "rsub_scalar", "rsub_scalar_bf16", "rsub_int", "bool_and", "bool_or",
         "bool_xor"}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_program(check, name):
    fn, args = PROGRAMS[name]
    stats = check.captured(fn, args)
    if name in FUSED:
        assert stats["kernels"] == 1 and stats["extern_steps"] == 0, stats
