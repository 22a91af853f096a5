"""Differential tests: contexts inside the program (autocast, grad mode), inference mode,
list inputs, the same tensor passed twice, Python control flow on shapes."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


def test_inference_mode(check):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.SiLU(), nn.LayerNorm(16), nn.Linear(16, 4)).eval()
    check.captured(m, (torch.randn(3, 8),), no_grad="inference_mode")


def test_inference_mode_input_mutation(check):
    def f(x, y):
        x.mul_(2)
        return x + y

    check.captured(f, (torch.randn(4), torch.randn(4)), no_grad="inference_mode")


def test_autocast_bf16_region(check):
    # Dynamo records autocast enter/exit in the graph; ember must honour them.
    def f(a, b):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            c = a @ b
            d = c.relu()
        return d, d.float() + a.sum()

    check.captured(f, (torch.randn(4, 8), torch.randn(8, 4)))


def test_enable_grad_inside_program(check):
    # The program turns grad mode on; nothing requires grad, so it is still inference.
    def f(x):
        with torch.enable_grad():
            y = x * 2
        return y.sin(), torch.is_grad_enabled()

    check.captured(f, (torch.randn(3),))


def test_no_grad_inside_program_under_grad_mode(check):
    def f(x):
        with torch.no_grad():
            y = x.exp()
        return y + 1

    check.captured(f, (torch.randn(3),), no_grad=False)


def test_list_of_tensors_input(check):
    def f(xs, w):
        return torch.stack([x @ w for x in xs]).sum(0), len(xs)

    check.captured(f, ([torch.randn(2, 3) for _ in range(4)], torch.randn(3, 5)))


def test_dict_of_tensors_input(check):
    def f(batch):
        return batch["x"] * batch["mask"].unsqueeze(-1), batch["x"].sum()

    check.captured(f, ({"x": torch.randn(2, 3, 4), "mask": torch.tensor([[1.0, 0.0, 1.0], [1.0, 1.0, 0.0]])},))


def test_same_tensor_twice(check):
    def f(a, b):
        return a * b + a

    x = torch.randn(5)
    check(f, (x, x), expect_fallbacks=0)


def test_same_tensor_twice_with_mutation(check):
    # a and b are the same tensor: the in-place add through `a` must be seen through `b`.
    def f(a, b):
        a.add_(1)
        return b * 2

    x = torch.randn(5)
    check(f, (x, x), expect_fallbacks=0)


def test_shape_dependent_python_control_flow(check):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(6, 6)

        def forward(self, x):
            if x.shape[-1] == 6 and x.dim() == 3:
                x = self.proj(x)
            for _ in range(x.shape[0]):
                x = x + x.mean(0, keepdim=True)
            return x.view(x.size(0), -1)

    torch.manual_seed(0)
    check.captured(M().eval(), (torch.randn(3, 2, 6),))


def test_tied_weights(check):
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(11, 6)
            self.head = nn.Linear(6, 11, bias=False)
            self.head.weight = self.emb.weight

        def forward(self, ids):
            return self.head(F.layer_norm(self.emb(ids), (6,)))

    torch.manual_seed(0)
    check.captured(Tied().eval(), (torch.randint(0, 11, (2, 5)),))


def test_constant_attribute_tensor(check):
    # A plain tensor attribute (neither parameter nor buffer) used by forward.
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = torch.linspace(0.5, 2.0, 4)

        def forward(self, x):
            return x * self.scale

    check.captured(M(), (torch.randn(3, 4),))
