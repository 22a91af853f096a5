"""The graph IR's text parser (src/graph/parser.h) against graphs ember produces: each printed
graph parses back to the same text. (tests/cpp/graph/parser_test.cpp covers each rule of the
text; conftest.py checks every graph the whole suite captures at the session's end.)"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import ember
import ember._C as C
from ember.errors import CompileError


def round_trips(text: str) -> None:
    assert C.reprint_graph_text(text) == text


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        y = F.relu(self.bn(self.conv(x)))
        y = F.max_pool2d(y, 2).mean((2, 3))
        return F.log_softmax(self.fc(y), -1), y.transpose(0, 1)[:, ::2]


@pytest.mark.parametrize("device", [None, "cuda:0"])
def test_traced_graphs_round_trip(device):
    m = Block().eval()
    graph = ember.trace(m, [torch.randn(2, 3, 8, 8)], device=device)
    round_trips(str(graph))


def test_joint_graphs_round_trip():
    from ember.tracing import trace_joint
    w = torch.randn(4, 4)
    joint, _, sig = trace_joint(lambda x, w: (torch.tanh(x @ w) * 2).sum(), [torch.randn(3, 4), w],
                                [True, True])
    round_trips(str(joint))
    forward, backward, _ = C.split_training_graph(joint, **sig)
    round_trips(str(forward))
    round_trips(str(backward))


def test_captured_language_model_graphs_round_trip():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(vocab_size=100, n_positions=32, n_embd=32, n_layer=2, n_head=2)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()
    before = len(ember.capture.records())
    with torch.no_grad():
        ember.compile(model)(torch.randint(0, 100, (2, 8)))
    graphs = [r["graph"] for r in ember.capture.records()[before:] if r.get("graph")]
    assert graphs
    for text in graphs:
        round_trips(text)


def test_bad_text_names_line_and_column():
    with pytest.raises(CompileError, match=r"line 3:11: .*%1"):
        C.reprint_graph_text("graph {\n  input %0 : f32[2] cpu  # user x\n  return (%1)\n}\n")
