"""Differential tests: output layouts (expanded, offset, permuted, channels-last, as_strided
outputs of computed tensors), more in-place patterns and a mixed bag of ops, as one table."""

from __future__ import annotations

import pytest
import torch

PROGRAMS = {
    "const_only": (lambda x: torch.arange(5), (torch.randn(2),)),
    "rand_only": (lambda x: torch.rand(5), (torch.randn(2),)),
    "scalar_input_mutation": (lambda s, x: (s.add_(1), x * s)[1], (torch.tensor(1.5), torch.randn(3))),
    "expanded_output": (lambda x: (x + 1).expand(3, 4), (torch.randn(4),)),
    "offset_output": (lambda x: (x + 1)[1:], (torch.randn(4, 3),)),
    "permuted_output": (lambda x: (x + 1).permute(1, 0), (torch.randn(4, 3),)),
    "channels_last_output": (lambda x: (x * 2).contiguous(memory_format=torch.channels_last),
                             (torch.randn(2, 3, 4, 5),)),
    "as_strided_output": (lambda x: (x * 2).as_strided((2, 2), (1, 2), 1), (torch.randn(6),)),
    "diag_embed": (lambda x: torch.diag_embed(x) + x.diag_embed().mT, (torch.randn(2, 3),)),
    "unfold_output": (lambda x: (x * 1).unfold(1, 3, 2), (torch.randn(2, 9),)),
    "mutation_through_view_chain": (lambda x: x.view(2, 6)[:, ::2].mul_(3).sum(), (torch.randn(3, 4),)),
    "index_copy_input": (lambda x, i, s: x.index_copy_(0, i, s).sum(),
                         (torch.randn(4, 2), torch.tensor([3, 0]), torch.randn(2, 2))),
    "zero_size_output": (lambda x: x[:, :0] * 2, (torch.randn(3, 4),)),
    "bool_view_output": (lambda x: (x > 0).view(-1), (torch.randn(3, 4),)),
    "float_div_by_zero": (lambda x: x // 0.0, (torch.randn(3),)),
    "nan_and_inf": (lambda x: (x - x.max()).log(), (torch.randn(3),)),
    "int32_cumsum": (lambda x: x.cumsum(0), (torch.arange(5, dtype=torch.int32),)),
    "int_pow": (lambda x: x ** 2, (torch.arange(5),)),
    "complex_output": (lambda x: torch.view_as_complex(x) * 2, (torch.randn(3, 2),)),
    "rfft": (lambda x: torch.fft.rfft(x).abs(), (torch.randn(8),)),
    "linalg_inv": (lambda x: torch.linalg.inv(x @ x.mT + torch.eye(3)), (torch.randn(3, 3),)),
    "cdist": (lambda a, b: torch.cdist(a, b), (torch.randn(4, 3), torch.randn(5, 3))),
    "einsum_chain": (lambda a, b, c: torch.einsum("ij,jk,kl->il", a, b, c),
                     (torch.randn(2, 3), torch.randn(3, 4), torch.randn(4, 5))),
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_program(check, name):
    fn, args = PROGRAMS[name]
    check.captured(fn, args, atol=1e-5, rtol=1e-5)
