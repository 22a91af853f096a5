"""CompiledFunction's diagnostics (scripts/debug_training_steps.py reads them): the forward and
backward graphs as text, the kernels the Triton path refused, and the copies made at run time
because an extern returned another layout than traced."""

import torch

from ember.testing import recorded_compiled_functions


def test_a_conv_net_step_has_no_layout_copies_or_refusals():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8),
                                torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 1))
    x = torch.randn(2, 3, 8, 8)
    with recorded_compiled_functions() as made:
        torch.compile(model, backend="ember")(x).sum().backward()
    (f,) = made
    forward, backward = f.graphs
    assert forward.startswith("graph {") and "aten::convolution(" in forward, forward
    assert "aten::convolution_backward(" in backward, backward
    assert f.refused_kernels == []
    assert f.layout_copies == (0, 0, [])
