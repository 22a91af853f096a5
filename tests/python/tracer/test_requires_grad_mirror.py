"""A tracer input requires grad when the tensor it stands for does, under no_grad too
(tracer/trace_session.cpp, mirror_requires_grad): ATen's decompositions read it, and the graph
must make eager's choices. matmul folds a 3D input times a weight that requires grad into one mm
(should_fold); without the flag it ran a bmm over the leading dim with the weight expanded
(Longformer's projections of its transposed [seq, batch, 768] input on the H200: 36 products of
4 rows each, 49.8 of 80 ms per step)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

import ember
from ember.tracing import trace_with_structure


def test_linear_of_a_transposed_input_folds_into_one_mm_as_eager():
    x = torch.randn(4, 64, 32).transpose(0, 1)
    w = torch.randn(48, 32, requires_grad=True)
    with torch.no_grad():
        graph, _ = trace_with_structure(lambda x, w: F.linear(x, w), [x, w])
    assert "aten::mm" in graph.ops and "aten::bmm" not in graph.ops, graph.ops
    # Without requires_grad, eager itself runs a bmm: the graph follows.
    with torch.no_grad():
        graph, _ = trace_with_structure(lambda x, w: F.linear(x, w), [x, w.detach()])
    assert "aten::bmm" in graph.ops, graph.ops


def test_capture_under_no_grad_folds_and_matches_eager():
    lin = nn.Linear(32, 48)
    x = torch.randn(4, 64, 32).transpose(0, 1)
    c = ember.compile(lin)
    with torch.no_grad():
        out, expected = c(x), lin(x)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    assert not out.requires_grad
