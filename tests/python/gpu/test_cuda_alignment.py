"""Note [Buffers aligned to 16 bytes] (runtime/triton_runtime.cpp): Triton kernels are compiled for
buffers whose addresses are multiples of 16 bytes; a launch on a buffer that is not (a view at an
odd offset) runs on an aligned copy of it, written back when the kernel writes it. Each case is
compared with eager and counts the launches that copied. Skipped where no GPU is present."""

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def misaligned(shape, dtype=torch.bfloat16, offset=1):
    """A tensor of `shape` at `offset` elements into its storage (not 16-byte aligned)."""
    n = 1
    for s in shape:
        n *= s
    base = torch.randn(n + offset, device="cuda", dtype=dtype)
    x = base[offset:].view(shape)
    assert x.data_ptr() % 16 != 0
    return base, x


def counted(fn):
    import ember._C as C

    before = C.num_realigned_launches()
    out = fn()
    torch.cuda.synchronize()
    return out, C.num_realigned_launches() - before


def test_a_misaligned_input_is_read_through_an_aligned_copy():
    import ember
    import ember._C as C

    def f(x, y):
        return torch.relu(x * 2 + y).float().sum(-1), torch.sigmoid(x) * y

    _, x = misaligned((64, 256))
    y = torch.randn(64, 256, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        compiled = C.CompiledGraph(ember.trace(f, (x, y)))
        got, copied = counted(lambda: compiled(x, y))
        assert copied >= 1
        for g, w in zip(got, f(x, y)):
            torch.testing.assert_close(g, w, atol=1e-2, rtol=1e-2)
        # The same graph on aligned buffers copies nothing.
        x2 = x.clone()
        got, copied = counted(lambda: compiled(x2, y))
        assert copied == 0
        for g, w in zip(got, f(x2, y)):
            torch.testing.assert_close(g, w, atol=1e-2, rtol=1e-2)


def test_a_misaligned_input_mutated_in_place_is_written_back():
    import ember

    def f(x, y):
        x.mul_(2).add_(y)
        return (x * y).sum()

    base, x = misaligned((32, 128), dtype=torch.float32)
    y = torch.randn(32, 128, device="cuda")
    base_eager = base.clone()
    x_eager = base_eager[1:].view(32, 128)
    want = f(x_eager, y)
    compiled = ember.compile(f)
    with torch.no_grad():
        got, copied = counted(lambda: compiled(x, y))
    assert copied >= 1
    torch.testing.assert_close(got, want)
    # The mutation reached the caller's tensor, and the element before it is untouched.
    torch.testing.assert_close(base, base_eager)


def test_a_misaligned_expanded_input():
    """A broadcast (stride 0) view at an odd offset: the copy takes the bytes its layout spans."""
    import ember
    import ember._C as C

    def f(x, y):
        return torch.tanh(x) + y

    base = torch.randn(65, device="cuda", dtype=torch.float16)
    x = base[1:].view(64, 1).expand(64, 512)
    y = torch.randn(64, 512, device="cuda", dtype=torch.float16)
    with torch.no_grad():
        compiled = C.CompiledGraph(ember.trace(f, (x, y)))
        got, copied = counted(lambda: compiled(x, y))
    assert copied >= 1
    torch.testing.assert_close(got[0], f(x, y), atol=1e-3, rtol=1e-3)


def test_a_misaligned_operand_of_a_matmul_template(tmp_path, monkeypatch):
    import ember
    import ember._C as C

    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))

    def f(a, w):
        return torch.relu(a @ w) * 2

    _, a = misaligned((256, 512))
    w = torch.randn(512, 256, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        compiled = C.CompiledGraph(ember.trace(f, (a, w)), matmul_templates=True)
        for _ in range(3):  # the first call times the template against cuBLAS
            got = compiled(a, w)
            torch.testing.assert_close(got[0], f(a, w), atol=0.5, rtol=5e-2)
