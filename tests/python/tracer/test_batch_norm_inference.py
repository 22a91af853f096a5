"""Batch norm in eval mode on CUDA is traced as its per-channel affine map, `x * alpha[c] +
beta[c]`, with alpha and beta computed once per channel (src/rewrite/batch_norm_inference.h).
Traced here for a cuda:0 the inputs only claim (nothing runs); tests/python/gpu runs it against
eager. (F.batch_norm itself makes a CUDA tensor eagerly, so the ops are called directly.)"""

import pytest
import torch

import ember

C = 16


def _params():
    return [torch.randn(C), torch.rand(C) + 0.5, torch.randn(C), torch.randn(C)]


def _no_training(x, rm, rv, w, b):
    return torch.relu(torch.ops.aten._native_batch_norm_legit_no_training(x, w, b, rm, rv, 0.1,
                                                                           1e-5)[0])


def _cudnn(x, rm, rv, w, b):
    return torch.ops.aten.cudnn_batch_norm(x, w, b, rm, rv, False, 0.1, 1e-5)[0]


def test_bf16_channels_last_is_an_affine_map_per_channel():
    x = torch.randn(8, C, 10, 10, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    graph = ember.trace(_no_training, [x, *_params()], device="cuda:0")
    text = str(graph)
    assert "batch_norm" not in " ".join(graph.ops), text
    # The per-channel terms in f32 on [C]; the map in f32 at x's layout, rounded once to bf16.
    assert "f32[16] cuda:0 = aten::sqrt" in text and "f32[16] cuda:0 = aten::reciprocal" in text
    assert "f32[8, 16, 10, 10]{1600, 1, 160, 16} cuda:0 = aten::add.Tensor" in text, text
    assert "bf16[8, 16, 10, 10]{1600, 1, 160, 16} cuda:0 = aten::relu" in text, text


def test_cudnn_batch_norm_in_eval_mode_too():
    x = torch.randn(8, C, 10, 10).to(memory_format=torch.channels_last)
    graph = ember.trace(_cudnn, [x, *_params()], device="cuda:0")
    assert "aten::cudnn_batch_norm" not in graph.ops and "aten::reciprocal" in graph.ops


@pytest.mark.parametrize("case", ["cpu", "training"])
def test_left_alone(case):
    x = torch.randn(8, C, 10, 10)
    params = _params()
    dev = None if case == "cpu" else "cuda:0"
    if case == "training":
        fn = lambda x, rm, rv, w, b: torch.ops.aten.cudnn_batch_norm(x, w, b, rm, rv, True, 0.1,
                                                                     1e-5)[0]
    else:
        fn = _cudnn if case != "cpu" else _no_training
    ops = ember.trace(fn, [x, *params], device=dev).ops
    assert any("batch_norm" in op for op in ops), ops
