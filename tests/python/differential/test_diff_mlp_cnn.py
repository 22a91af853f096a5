"""Differential tests: MLPs and CNNs (with BatchNorm in eval and train mode)."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F


def _seeded(module: nn.Module, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    for p in module.parameters():
        with torch.no_grad():
            p.copy_(torch.randn_like(p) * 0.2)
    return module


class MLP(nn.Module):
    def __init__(self, d_in=16, d_hidden=32, d_out=8, act=nn.ReLU, bias=True):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden, bias=bias)
        self.act = act()
        self.fc2 = nn.Linear(d_hidden, d_hidden, bias=bias)
        self.fc3 = nn.Linear(d_hidden, d_out, bias=bias)

    def forward(self, x):
        return self.fc3(self.act(self.fc2(self.act(self.fc1(x)))))


class ResidualMLP(nn.Module):
    def __init__(self, d=32, depth=3):
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
            for _ in range(depth))
        self.head = nn.Linear(d, 4)

    def forward(self, x):
        for b in self.blocks:
            x = x + b(x)
        return self.head(x).log_softmax(-1)


@pytest.mark.parametrize("act", [nn.ReLU, nn.GELU, nn.SiLU, nn.Tanh])
def test_mlp(check, act):
    m = _seeded(MLP(act=act)).eval()
    check.captured(m, (torch.randn(4, 16),))


def test_mlp_no_bias_3d_input(check):
    m = _seeded(MLP(bias=False)).eval()
    check.captured(m, (torch.randn(2, 5, 16),))


def test_mlp_fp64(check):
    m = _seeded(MLP()).double().eval()
    check.captured(m, (torch.randn(4, 16, dtype=torch.float64),))


def test_mlp_bf16(check):
    m = _seeded(MLP()).to(torch.bfloat16).eval()
    check.captured(m, (torch.randn(4, 16).to(torch.bfloat16),))


def test_residual_mlp(check):
    m = _seeded(ResidualMLP()).eval()
    check.captured(m, (torch.randn(3, 7, 32),))


def test_functional_mlp(check):
    torch.manual_seed(0)
    w1, b1, w2 = torch.randn(32, 16), torch.randn(32), torch.randn(8, 32)

    def f(x, w1, b1, w2):
        h = F.linear(x, w1, b1).relu()
        return h @ w2.t(), torch.addmm(b1, x, w1.t())

    check.captured(f, (torch.randn(4, 16), w1, b1, w2))


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(16)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(16 * 2 * 2, 10)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        x = self.pool(x)
        return self.fc(torch.flatten(x, 1))


def _cnn_with_stats():
    m = _seeded(SmallCNN())
    # Non-trivial running stats, so eval mode does not see mean 0 / var 1.
    for bn in (m.bn1, m.bn2):
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
    return m


def test_cnn_batchnorm_eval(check):
    m = _cnn_with_stats().eval()
    check.captured(m, (torch.randn(2, 3, 8, 8),))


def test_cnn_batchnorm_train_updates_running_stats(check):
    # Train mode under no_grad: batch statistics are used and running_mean, running_var and
    # num_batches_tracked are updated in place; check_model compares the state_dicts after
    # each of the two runs.
    m = _cnn_with_stats().train()
    check.captured(m, (torch.randn(4, 3, 8, 8),))


def test_batchnorm1d_train(check):
    bn = nn.BatchNorm1d(6, momentum=0.3).train()
    check.captured(bn, (torch.randn(5, 6),))


def test_batchnorm1d_train_momentum_none(check):
    # momentum=None: a cumulative average, `1.0 / float(self.num_batches_tracked)`: Dynamo
    # graph-breaks on the float() (and currently runs the whole forward eagerly); whatever
    # reaches ember must be right.
    bn = nn.BatchNorm1d(6, momentum=None).train()
    check(bn, (torch.randn(5, 6),), expect_fallbacks=0)


def test_batchnorm_functional_buffers_as_inputs(check):
    def f(x, rm, rv, w, b):
        return F.batch_norm(x, rm, rv, w, b, training=True, momentum=0.3, eps=1e-3)

    c = 4
    check.captured(f, (torch.randn(3, c, 5), torch.zeros(c), torch.ones(c), torch.randn(c),
                       torch.randn(c)))


def test_conv1d_pools(check):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv1d(4, 6, kernel_size=3, padding=2, dilation=2)

        def forward(self, x):
            y = self.conv(x)
            return F.avg_pool1d(y, 2), F.max_pool1d(y, 3, stride=1), F.adaptive_avg_pool1d(y, 1)

    check.captured(_seeded(M()).eval(), (torch.randn(2, 4, 12),))


def test_conv2d_groups_adaptive_pool(check):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
            self.pw = nn.Conv2d(8, 4, 1)
            self.gn = nn.GroupNorm(2, 4)

        def forward(self, x):
            y = self.gn(self.pw(F.hardswish(self.dw(x))))
            return F.adaptive_avg_pool2d(y, (1, 1)).flatten(1), F.avg_pool2d(y, 2)

    check.captured(_seeded(M()).eval(), (torch.randn(2, 8, 6, 6),))


def test_conv_channels_last_input(check):
    # A channels-last input: strides of the output follow the input's memory format.
    conv = _seeded(nn.Conv2d(4, 8, 3, padding=1)).eval()
    x = torch.randn(2, 4, 5, 5).to(memory_format=torch.channels_last)
    check.captured(conv, (x,), atol=1e-5, rtol=1e-5)


_POOLS = {
    "max_3x3_s2_p1_after_relu": lambda x: F.max_pool2d(torch.relu(x * 2 + 1), 3, 2, 1),
    "max_2x2": lambda x: F.max_pool2d(x, 2),
    "max_ceil_mode": lambda x: F.max_pool2d(x, 3, 2, ceil_mode=True),
    "max_dilated": lambda x: F.max_pool2d(x, 3, 1, 1, dilation=2),
    "avg_3x3_s1_p1": lambda x: F.avg_pool2d(x, 3, 1, 1),
    "avg_exclude_pad": lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
    "avg_exclude_pad_ceil": lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True,
                                                  count_include_pad=False),
    "avg_divisor_override": lambda x: F.avg_pool2d(x, 2, divisor_override=3),
    "avg_ceil_mode": lambda x: F.avg_pool2d(x, 3, 2, ceil_mode=True),  # left to ATen
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("name", list(_POOLS))
def test_pool2d_index_functions(check, name, channels_last, dtype):
    # 2D pools fuse as index functions (src/sched/pooling.h): NaN propagates through max, padding
    # is -inf for max and excluded or counted for avg as eager, ceil-mode windows clipped.
    torch.manual_seed(0)
    x = torch.randn(2, 5, 11, 13, dtype=dtype)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    x[0, 0, 3, 4] = float("nan")
    check.captured(_POOLS[name], (x,))


def test_pool_kernels_fuse():
    import ember

    x = torch.randn(2, 5, 11, 13)
    fused = ember._C.CompiledGraph(ember.trace(lambda x: F.avg_pool2d(x * 2, 3, 2, 1), [x]))
    assert fused.num_kernels == 1 and fused.num_extern_steps == 0, fused.describe_steps()
    # The indices of a max pool are not computed: a pool whose indices are read stays ATen's.
    kept = ember._C.CompiledGraph(ember.trace(lambda x: F.max_pool2d(x, 2, return_indices=True),
                                              [x]))
    assert kept.num_extern_steps == 1, kept.describe_steps()
