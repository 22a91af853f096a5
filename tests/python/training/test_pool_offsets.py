"""Note [Max-pool indices saved as window offsets] (rewrite/pool_offsets.h): in training, a max
pool's indices are saved as int8 offsets in their windows and rebuilt in the backward, as
Inductor's low-memory pool does (ResNet-50's stem: 196 MiB of int64 indices saved, 25 MiB of
offsets now). On the CPU with EMBER_SPLIT_REDUCTIONS=all; traced for cuda:0 with no GPU."""

import pytest
import torch

import ember._C as C
import ember.tracing as T
from ember.testing import check_model

F = torch.nn.functional

# (kernel, stride, padding, dilation, ceil_mode)
WINDOWS = [(3, 2, 1, 1, False), (2, None, 0, 1, False), ((3, 2), (2, 1), (1, 0), 1, True),
           (3, 1, 1, 2, False), (11, 3, 5, 1, True)]


class Stem(torch.nn.Module):
    def __init__(self, window):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.window = window

    def forward(self, x):
        k, s, p, d, ceil = self.window
        y = F.max_pool2d(self.conv(x).relu(), k, s, p, d, ceil_mode=ceil)
        return (y * y).sum(), y


@pytest.mark.parametrize("window", WINDOWS, ids=[str(w) for w in WINDOWS])
def test_gradients_match_eager(window, monkeypatch):
    monkeypatch.setenv("EMBER_SPLIT_REDUCTIONS", "all")
    check_model(Stem(window), (torch.randn(2, 3, 15, 17),), grad=True)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bf16_gradients_as_close_to_f64_as_eager(seed, monkeypatch):
    """In bf16 the gradient sums round differently (the pool's backward sums in f32 and rounds
    once): the compiled gradients are as close to an f64 reference as eager's."""
    monkeypatch.setenv("EMBER_SPLIT_REDUCTIONS", "all")
    torch.manual_seed(seed)
    m = Stem(WINDOWS[0]).to(torch.bfloat16)
    x = torch.randn(2, 3, 15, 17, dtype=torch.bfloat16)
    ref = Stem(WINDOWS[0]).double()
    ref.load_state_dict(m.state_dict())
    ref(x.double())[0].backward()

    def weight_grad_error(module):
        m.zero_grad()
        module(x)[0].backward()
        return (m.conv.weight.grad.double() - ref.conv.weight.grad).abs().max().item()

    eager = weight_grad_error(m)
    torch._dynamo.reset()
    assert weight_grad_error(torch.compile(m, backend="ember")) <= 2 * eager + 1e-2


def test_channels_last_and_unbatched(monkeypatch):
    monkeypatch.setenv("EMBER_SPLIT_REDUCTIONS", "all")
    m = Stem(WINDOWS[0]).to(memory_format=torch.channels_last)
    check_model(m, (torch.randn(2, 3, 15, 17).to(memory_format=torch.channels_last),), grad=True)

    def unbatched(x):
        return F.max_pool2d(x.relu(), 3, 2, 1)

    x = torch.randn(4, 9, 9, requires_grad=True)
    got = torch.compile(unbatched, backend="ember")(x)
    (g,) = torch.autograd.grad(got.sum(), x)
    (want,) = torch.autograd.grad(unbatched(x).sum(), x)
    torch.testing.assert_close(g, want)


def test_the_indices_are_saved_as_bytes():
    args = [torch.randn(16, 64, 56, 56)]
    joint, _, sig = T.trace_joint(lambda x: F.max_pool2d(x.exp(), 3, 2, 1).sum(), args, [True],
                                  device="cuda:0")
    forward, _, saved = C.split_training_graph(joint, **sig)
    assert "aten::max_pool2d_with_indices" in joint.ops
    # The input (read by ATen's backward) and a byte per output, not 8 bytes per output.
    x_bytes, outputs = 16 * 64 * 56 * 56 * 4, 16 * 64 * 28 * 28
    assert saved <= x_bytes + outputs + 1024, saved  # and two aranges of 28
    assert "i8[16, 64, 28, 28]" in str(forward)


def test_the_program_keeps_its_indices(monkeypatch):
    monkeypatch.setenv("EMBER_SPLIT_REDUCTIONS", "all")

    def fn(x):
        y, i = F.max_pool2d(x, 3, 2, 1, return_indices=True)
        return y.sum(), i

    x = torch.randn(2, 4, 11, 11, requires_grad=True)
    got = torch.compile(fn, backend="ember")(x)
    want = fn(x)
    torch.testing.assert_close(got[1], want[1])
    got[0].backward()


def test_the_backward_reads_no_input():
    """Note [A max pool's backward from its offsets]: without dilation the backward gathers from
    the windows, and nothing saves the pool's input (ATen's backward read it for its sizes)."""
    args = [torch.randn(16, 64, 56, 56)]
    joint, _, sig = T.trace_joint(lambda x: F.max_pool2d(x * 2, 3, 2, 1).sum(), args, [True],
                                  device="cuda:0")
    assert "aten::max_pool2d_with_indices_backward" not in joint.ops
    _, _, saved = C.split_training_graph(joint, **sig)
    assert saved <= 16 * 64 * 28 * 28 + 1024, saved  # a byte per output
