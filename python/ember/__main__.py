"""`python -m ember`: compile a small bundled model, check it against eager, print times."""

from __future__ import annotations

import argparse
import time

import torch

import ember
from ember import metrics


class TinyTransformerBlock(torch.nn.Module):
    """A pre-norm transformer block: attention and an MLP, with residuals."""

    def __init__(self, dim: int = 64, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.norm1 = torch.nn.LayerNorm(dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.norm2 = torch.nn.LayerNorm(dim)
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, d // self.heads).unbind(2)
        a = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
        return x + self.mlp(self.norm2(x))


def _median_time(fn, x, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(x)
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()

    torch.manual_seed(0)
    model = TinyTransformerBlock().eval()
    x = torch.randn(4, 32, 64)
    metrics.reset()
    compiled = torch.compile(model, backend="ember")
    with torch.no_grad():
        t0 = time.perf_counter()
        expected = model(x)
        eager_first = time.perf_counter() - t0
        t0 = time.perf_counter()
        actual = compiled(x)
        compiled_first = time.perf_counter() - t0
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)
        eager = _median_time(model, x, args.repeat)
        ours = _median_time(compiled, x, args.repeat)
    stats = metrics.snapshot()
    print(f"ember {ember.__version__} on torch {torch.__version__}")
    print(f"model: TinyTransformerBlock, input {tuple(x.shape)}: matches eager")
    print(f"graphs {stats['graphs']}, nodes {stats['nodes']}, fallbacks {stats['fallbacks']}")
    print(f"first call: eager {eager_first * 1e3:.1f} ms, ember {compiled_first * 1e3:.1f} ms "
          f"(compile {max(compiled_first - eager_first, 0) * 1e3:.1f} ms)")
    print(f"steady state (median of {args.repeat}): eager {eager * 1e6:.0f} us, "
          f"ember {ours * 1e6:.0f} us ({eager / ours:.2f}x)")
    return 0 if stats["fallbacks"] == 0 and stats["graphs"] > 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
