"""Real models, run eagerly and through ember: a small BERT and GPT-2 (transformers, random
weights) and a ResNet-like CNN. Eval mode, no_grad."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

transformers = pytest.importorskip("transformers")

# Whole-model comparisons: ember runs the same ATen kernels, but accumulated rounding over a few
# layers may differ slightly if it reorders or decomposes; keep the bound tight but not exact.
MODEL_TOL = dict(atol=1e-4, rtol=1e-4)


def _bert(attn_implementation: str):
    from transformers import BertConfig, BertModel

    config = BertConfig(vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=128, max_position_embeddings=64,
                        attn_implementation=attn_implementation)
    torch.manual_seed(0)
    return BertModel(config).eval()


def _gpt2(attn_implementation: str):
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=100, n_positions=64, n_embd=64, n_layer=2, n_head=2,
                        bos_token_id=0, eos_token_id=0, attn_implementation=attn_implementation)
    torch.manual_seed(0)
    return GPT2LMHeadModel(config).eval()


def _ids(vocab=100, shape=(2, 16), seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, shape, generator=g)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_bert(check, attn):
    model = _bert(attn)
    ids = _ids()
    mask = torch.ones_like(ids)
    mask[1, 12:] = 0  # padding in the second sequence
    # Dynamo captures each of these models in one graph (checked with a counting backend).
    check.captured(model, (), {"input_ids": ids, "attention_mask": mask}, min_nodes=50, **MODEL_TOL)


def test_bert_input_ids_only(check):
    model = _bert("sdpa")
    check.captured(model, (_ids(),), min_nodes=50, **MODEL_TOL)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_gpt2_lm_head(check, attn):
    model = _gpt2(attn)
    # use_cache=False: no DynamicCache object in the outputs.
    check.captured(model, (), {"input_ids": _ids(), "use_cache": False}, min_nodes=50, **MODEL_TOL)


def _padded_ids():
    ids = _ids()
    mask = torch.ones_like(ids)
    mask[0, :3] = 0  # left padding in the first sequence
    return ids, mask


def test_gpt2_padding_mask_all_outputs(check):
    # Dynamo currently splits this into 2 graphs (a graph break in transformers' mask code).
    ids, mask = _padded_ids()
    res = check(_gpt2("eager"), (), {"input_ids": ids, "attention_mask": mask, "use_cache": False,
                                     "output_hidden_states": True, "output_attentions": True},
                expect_fallbacks=0, min_nodes=50, **MODEL_TOL)
    if check.is_ember:
        assert res["graphs"] >= 1, res


def test_gpt2_with_labels_loss(check):
    ids = _ids()
    res = check(_gpt2("sdpa"), (), {"input_ids": ids, "labels": ids, "use_cache": False},
                expect_fallbacks=0, min_nodes=50, **MODEL_TOL)
    if check.is_ember:
        assert res["graphs"] >= 1, res


def test_bert_all_outputs(check):
    ids, mask = _padded_ids()
    check.captured(_bert("eager"), (), {"input_ids": ids, "attention_mask": mask, "output_hidden_states": True,
                                        "output_attentions": True}, min_nodes=50, **MODEL_TOL)


def test_gpt2_bf16(check):
    model = _gpt2("sdpa").to(torch.bfloat16)
    check.captured(model, (), {"input_ids": _ids(), "use_cache": False}, min_nodes=50)


def test_bert_train_mode_dropout(check):
    # Train mode under no_grad: dropout draws from the seeded global RNG in the same order as
    # eager, so the outputs match exactly.
    model = _bert("sdpa").train()
    ids = _ids()
    check.captured(model, (), {"input_ids": ids, "token_type_ids": torch.zeros_like(ids)}, min_nodes=50,
                   **MODEL_TOL)


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.down is None else self.down(x)
        out = F.relu(self.bn1(self.conv1(x)), inplace=True)
        out = self.bn2(self.conv2(out))
        out += identity
        return F.relu(out, inplace=True)


class TinyResNet(nn.Module):
    def __init__(self, num_classes=10, widths=(16, 32, 64)):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 3, padding=1, bias=False),
                                  nn.BatchNorm2d(widths[0]), nn.ReLU(inplace=True),
                                  nn.MaxPool2d(3, stride=2, padding=1))
        layers, cin = [], widths[0]
        for i, w in enumerate(widths):
            layers += [BasicBlock(cin, w, stride=1 if i == 0 else 2), BasicBlock(w, w)]
            cin = w
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(self.pool(x), 1))


def _resnet():
    torch.manual_seed(0)
    m = TinyResNet()
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            with torch.no_grad():
                mod.running_mean.uniform_(-0.1, 0.1)
                mod.running_var.uniform_(0.5, 1.5)
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.uniform_(-0.1, 0.1)
    return m


def test_resnet_eval(check):
    model = _resnet().eval()
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    check.captured(model, (x,), min_nodes=50, **MODEL_TOL)


def test_resnet_train_mode_batchnorm(check):
    # Train-mode BatchNorm under no_grad: running stats of every BN layer must match eager.
    model = _resnet().train()
    x = torch.randn(4, 3, 16, 16, generator=torch.Generator().manual_seed(3))
    check.captured(model, (x,), **MODEL_TOL)
