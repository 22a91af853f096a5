"""1x1 convolutions on CUDA in bf16/f16 inference of launch-bound sizes (all of them with
EMBER_CONV1X1_AS_MM=1) are traced as matrix products of the channels-last input's rows and the weight
(src/rewrite/conv_as_product.h). Traced for a cuda:0
the inputs only claim (nothing runs); tests/python/gpu/test_cuda_conv_as_product.py runs them
against eager."""

import torch
import torch.nn.functional as F

import ember
from ember.tracing import trace_joint


def _ops(fn, args, training=False):
    if training:  # a joint trace records under grad mode
        joint, _, _ = trace_joint(lambda *a: fn(*a).sum(), args, [False] + [True] * (len(args) - 1),
                                  device="cuda:0")
        text = str(joint)
    else:
        text = str(ember.trace(fn, args, device="cuda:0"))
    return text, [ln.split("= ")[1].split("(")[0] for ln in text.splitlines() if "= " in ln]


def _block(x, w1, b1, w2):
    # An inverted residual's 1x1 expand (bias, ReLU6) and 1x1 project (no bias) around a
    # depthwise 3x3, and the residual.
    y = F.relu6(F.conv2d(x, w1, b1))
    y = F.conv2d(y, torch.ones(48, 1, 3, 3, dtype=y.dtype), padding=1, groups=48)
    return F.conv2d(y, w2) + x


def _args(dtype=torch.bfloat16, n=1):
    return [torch.randn(n, 16, 14, 14, dtype=dtype), torch.randn(48, 16, 1, 1, dtype=dtype),
            torch.randn(48, dtype=dtype), torch.randn(16, 48, 1, 1, dtype=dtype)]


def test_pointwise_convolutions_are_products_of_the_channels_last_rows(monkeypatch):
    # By default the launch-bound ones (at most launch_bound_products multiply-adds, not under
    # CUDA graphs: Note [Launch-bound products]); EMBER_CONV1X1_AS_MM=1 takes every one.
    for options in ({"launch_bound_products": 0}, {"launch_bound_products": 1000},
                    {"cuda_graphs": True}):
        with ember.config.patch(**options):
            text, ops = _ops(_block, _args())
        assert "aten::mm" not in ops and ops.count("aten::convolution") == 3, (options, text)
    for n in (1, 8):
        text, ops = _ops(_block, _args(n=n))
        assert ops.count("aten::mm") == 2, text
    monkeypatch.setenv("EMBER_CONV1X1_AS_MM", "1")
    for n in (1, 8):
        with ember.config.patch(launch_bound_products=1000):
            text, ops = _ops(_block, _args(n=n))
        assert ops.count("aten::mm") == 2, text
        assert ops.count("aten::convolution") == 1, text  # the depthwise one
        # The rows are a view of the channels-last input: no copy of it before the product.
        mm_lines = [ln for ln in text.splitlines() if "= aten::mm(" in ln]
        assert f"[{n * 196}, 48]" in mm_lines[0] and f"[{n * 196}, 16]" in mm_lines[1], text


def test_other_convolutions_and_settings_stay_convolutions(monkeypatch):
    monkeypatch.setenv("EMBER_CONV1X1_AS_MM", "1")
    x = torch.randn(2, 16, 8, 8, dtype=torch.bfloat16)
    w = torch.randn(32, 16, 1, 1, dtype=torch.bfloat16)
    cases = [
        (lambda x, w: F.conv2d(x, w, stride=2), [x, w], False),  # strided
        (lambda x, w: F.conv2d(x, w, padding=1), [x, w], False),  # padded
        (lambda x, w: F.conv2d(x, w, groups=2), [x, w[:, :8]], False),  # grouped
        (lambda x, w: F.conv2d(x, w), [x.float(), w.float()], False),  # f32: cuDNN's TF32
        (lambda x, w: F.conv2d(x, w), [x, w], True),  # training
    ]
    for fn, args, training in cases:
        text, ops = _ops(fn, args, training)
        assert "aten::convolution" in ops and "aten::mm" not in ops, text
    # On the CPU, oneDNN's convolution.
    text = str(ember.trace(lambda x, w: F.conv2d(x, w), [x, w]))
    assert "aten::convolution" in text and "aten::mm" not in text, text
