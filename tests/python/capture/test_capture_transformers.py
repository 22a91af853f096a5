"""Capture of transformers model classes that once broke it, as classes of program: a property
that makes a new torch.device per call (XLNet), a per-call cache object and a decoder layer's
`__call__` override (Falcon), list indices in a head split (Falcon's multi-query attention),
a `@torch.no_grad()` rotary embedding. Each: one graph, no graph break, no recompile on later
calls, eager's result.
"""

from __future__ import annotations

import pytest
import torch

import ember

transformers = pytest.importorskip("transformers")


def xlnet():
    cfg = transformers.XLNetConfig(vocab_size=100, d_model=32, n_layer=2, n_head=2, d_inner=64)
    return transformers.XLNetLMHeadModel(cfg)


def falcon():
    cfg = transformers.FalconConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                                    num_attention_heads=2)
    return transformers.FalconForCausalLM(cfg)


def falcon_new_architecture():
    cfg = transformers.FalconConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                                    num_attention_heads=4, num_kv_heads=2,
                                    new_decoder_architecture=True)
    return transformers.FalconForCausalLM(cfg)


@pytest.mark.parametrize("build", [xlnet, falcon, falcon_new_architecture])
def test_captured_whole_without_recompiles(build):
    torch.manual_seed(0)
    model = build().eval()
    ids = torch.randint(0, 100, (2, 16))
    c = ember.compile(model)
    before = len(ember.capture.records())
    with torch.no_grad():
        expected = model(ids).logits
        for call in range(3):
            torch.testing.assert_close(c(ids).logits, expected, atol=1e-5, rtol=1e-5)
            records = ember.capture.records()[before:]
            if call == 0:
                assert [r["captured"] and not r["graph_break"] for r in records] == [True], \
                    [r["reason"] for r in records]
    assert len(ember.capture.records()) - before == 1  # calls 2 and 3 compiled nothing
