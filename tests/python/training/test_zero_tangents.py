"""Note [Gradients no loss reached] (runtime/compiled_function.cpp): an output no loss reaches (a
language model's logits, returned with its loss) gets no gradient; the backward then runs a
program compiled with that tangent a single zero read by broadcast, not a full-size zeros
tensor written and read back (DistilBERT's f32 logits: 8 GB)."""

import copy

import torch

from ember.testing import recorded_compiled_functions


class Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(16, 16)
        self.head = torch.nn.Linear(16, 40)

    def forward(self, x, t):
        logits = self.head(torch.relu(self.body(x)))
        return torch.nn.functional.cross_entropy(logits, t), logits


def head_and_twin():
    torch.manual_seed(0)
    model = Head()
    return model, copy.deepcopy(model), torch.randn(8, 16), torch.randint(0, 40, (8,))


def test_an_output_without_gradient_runs_the_zero_tangent_program():
    model, twin, x, t = head_and_twin()
    with recorded_compiled_functions() as made:
        compiled = torch.compile(twin, backend="ember")
        for _ in range(2):
            for m in (model, twin):
                m.zero_grad()
            loss, _ = model(x, t)
            loss.backward()
            got, logits = compiled(x, t)
            got.backward()
            torch.testing.assert_close(got, loss)
            for p, q in zip(model.parameters(), twin.parameters()):
                torch.testing.assert_close(q.grad, p.grad)
    assert len(made) == 1 and made[0].num_zero_tangent_programs == 1
    assert made[0].backward_unfused_runs == 0


def test_both_outputs_reached_use_the_full_program():
    model, twin, x, t = head_and_twin()
    with recorded_compiled_functions() as made:
        loss, logits = torch.compile(twin, backend="ember")(x, t)
        (loss + logits.square().mean()).backward()
    ref_loss, ref_logits = model(x, t)
    (ref_loss + ref_logits.square().mean()).backward()
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(q.grad, p.grad)
    assert made[0].num_zero_tangent_programs == 0
