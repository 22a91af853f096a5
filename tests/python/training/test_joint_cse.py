"""graph/cse.h: a joint graph's common subexpressions merged before the split. Autograd records
each backward op on its own: BERT's head padded its f32 gradient twice for its two products (once
directly, once as the transpose of its transpose), 1.9 GB each."""

import torch

import ember._C as C
import ember.tracing as T
from ember.testing import check_model, recorded_compiled_functions

F = torch.nn.functional


def test_the_head_gradient_is_padded_once():
    V = 30522

    def head(x, w, b, t):
        logits = F.linear(x, w, b)
        return F.cross_entropy(logits.view(-1, V), t.view(-1)), logits

    args = [torch.randn(4, 512, 768), torch.randn(V, 768), torch.randn(V),
            torch.randint(0, V, (4, 512))]
    joint, _, sig = T.trace_joint(head, args, [True, True, True, False], device="cuda:0")
    _, backward, _ = C.split_training_graph(joint, **sig)
    pads = [ln for ln in str(backward).splitlines()
            if "constant_pad_nd" in ln and "[2048, 30524]" in ln.split("=")[0]]
    assert len(pads) == 1, str(backward)


class Shared(torch.nn.Module):
    """The same product twice and a weight transposed twice: merged, gradients as eager's."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(16, 16))
        self.v = torch.nn.Parameter(torch.randn(16, 16))

    def forward(self, x):
        a = torch.tanh(x @ self.w)
        b = torch.sigmoid(x @ self.w)
        return (a * b + x @ self.v.t().t()).sum(-1), self.v * 2, self.v * 2


def test_merged_graphs_match_eager():
    with recorded_compiled_functions() as made:
        check_model(Shared(), (torch.randn(8, 16, requires_grad=True),), grad=True,
                    expect_graphs=1)
    assert made


def test_outputs_stay_distinct():
    # `self.v * 2` twice: two outputs, never one tensor (an in-place update of one would change
    # the other).
    m = Shared()
    out = torch.compile(m, backend="ember")(torch.randn(8, 16))
    assert out[1].data_ptr() != out[2].data_ptr()
