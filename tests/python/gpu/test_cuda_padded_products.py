"""Note [Padded products in row blocks] (rewrite/matmul_padding.cpp): in inference a language
model's head with an unaligned vocabulary writes its contiguous logits block by block of rows
(ember::matmul_sliced) instead of a padded product and its contiguous copy. Compared with eager;
skipped where no GPU is present (tests/python/tracer/test_matmul_padding.py checks the traces and
the op on the CPU)."""

import pytest
import torch

import ember

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def test_large_padded_logits_are_made_in_row_blocks():
    # The call holds the logits and one scratch block (<= 64 MiB), not the logits twice.
    head = torch.nn.Linear(256, 30522).cuda().to(torch.bfloat16).eval()
    x = torch.randn(4096, 256, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        assert "ember::matmul_sliced" in ember.trace(head, (x,)).ops
        want = head(x)
        compiled = ember.compile(head)
        compiled(x)
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        got = compiled(x)
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
    assert got.is_contiguous() and got.shape == want.shape
    torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)
    logits = want.numel() * want.element_size()
    assert peak <= logits + (72 << 20), (peak / 2**20, logits / 2**20)
