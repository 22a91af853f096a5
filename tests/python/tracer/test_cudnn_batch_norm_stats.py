"""Note [cuDNN statistics, ember's normalization] (rewrite/batch_norm_rewrite.h): by default
(EMBER_CUDNN_BATCH_NORM unset or stats) a training-mode cuDNN batch norm keeps cuDNN's statistics and
backward, and its output is ember's pointwise normalization from them, which fuses with the ReLU
after it. Traced for cuda:0 with no GPU (nothing runs)."""

import torch

import ember
import ember._C as C


def bn_relu(x, w, b, rm, rv):
    y = torch.ops.aten.cudnn_batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5)[0]
    return torch.relu(y)


def args():
    x = torch.randn(16, 64, 28, 28).to(memory_format=torch.channels_last)
    return [x, torch.randn(64), torch.randn(64), torch.zeros(64), torch.ones(64)]


def test_the_output_is_normalized_from_cudnn_statistics(monkeypatch):
    monkeypatch.setenv("EMBER_CUDNN_BATCH_NORM", "stats")
    graph = ember.trace(bn_relu, args(), device="cuda:0")
    text = str(graph)
    assert graph.ops.count("aten::cudnn_batch_norm") == 1, text
    # cuDNN's own output is unread: the ReLU reads x - mean, scaled and shifted.
    bn_line = next(ln for ln in text.splitlines() if "aten::cudnn_batch_norm" in ln)
    y = bn_line.split("(")[1].split(" ")[0]  # the first result, %N
    assert f"({y}," not in text.split(bn_line)[1] and f"({y})" not in text.split(bn_line)[1], text
    plan = C.triton_plan(graph)
    assert [p["why"] for p in plan if p["why"]] == [], plan
    assert len(plan) == 1 and {"aten::sub.Tensor", "aten::relu"} <= set(plan[0]["ops"]), plan
    # The layout of eager's output (channels-last, as the input).
    out = text.split("return (")[1].split(")")[0]
    assert any(ln.strip().startswith(out + " : f32[16, 64, 28, 28]{50176, 1, 1792, 64}")
               for ln in text.splitlines()), text


def test_the_default_is_ember_s_normalization(monkeypatch):
    monkeypatch.delenv("EMBER_CUDNN_BATCH_NORM", raising=False)
    graph = ember.trace(bn_relu, args(), device="cuda:0")
    assert "aten::sub.Tensor" in graph.ops, str(graph)


def test_cudnn_s_output_is_kept_with_1(monkeypatch):
    monkeypatch.setenv("EMBER_CUDNN_BATCH_NORM", "1")
    graph = ember.trace(bn_relu, args(), device="cuda:0")
    assert "aten::sub.Tensor" not in graph.ops, str(graph)
