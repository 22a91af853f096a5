"""nn.Module programs under ember.compile (inference: under torch.no_grad)."""

from __future__ import annotations

import pytest
import json
import subprocess
import sys
import textwrap

import torch
import torch.nn as nn
import torch.nn.functional as F

from capture_check import check, expect_frames, same

import ember


def r(*shape):
    return torch.randn(*shape)


def mcheck(mod, *args, **kw):
    with torch.no_grad():
        return check(mod.eval() if kw.pop("eval", True) else mod, *args, **kw)


class MLP(nn.Module):
    def __init__(self, d=8, h=16):
        super().__init__()
        self.fc1 = nn.Linear(d, h)
        self.fc2 = nn.Linear(h, d)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, d=8):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.mlp = MLP(d)

    def forward(self, x):
        return x + self.mlp(self.norm(x))


class Net(nn.Module):
    def __init__(self, d=8, n=2):
        super().__init__()
        self.blocks = nn.ModuleList([Block(d) for _ in range(n)])
        self.head = nn.Linear(d, 3)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def test_linear():
    mcheck(nn.Linear(8, 4), r(2, 8))


def test_linear_without_bias():
    mcheck(nn.Linear(8, 4, bias=False), r(3, 8))


def test_conv2d():
    mcheck(nn.Conv2d(3, 4, 3, padding=1), r(1, 3, 6, 6), atol=1e-4, rtol=1e-4)


def test_batchnorm2d_eval():
    bn = nn.BatchNorm2d(3)
    bn.running_mean.copy_(r(3))
    bn.running_var.copy_(r(3).abs() + 0.5)
    mcheck(bn, r(2, 3, 4, 4), atol=1e-4, rtol=1e-4)


def test_layernorm():
    mcheck(nn.LayerNorm(8), r(2, 3, 8), atol=1e-4, rtol=1e-4)


def test_embedding():
    mcheck(nn.Embedding(10, 4), torch.tensor([[1, 2, 9], [0, 0, 3]]))


def test_dropout_eval_is_identity():
    mcheck(nn.Dropout(0.5), r(4, 4))


def test_activation_modules():
    mcheck(nn.Sequential(nn.ReLU(), nn.GELU(), nn.Tanh(), nn.SiLU()), r(4, 4))


def test_sequential():
    mcheck(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)), r(2, 8))


def test_custom_mlp():
    mcheck(MLP(), r(2, 8))


def test_nested_custom_modules_and_module_list_loop():
    mcheck(Net(), r(2, 8), atol=1e-4, rtol=1e-4)


class Stack3(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])
        self.norms = nn.ModuleList([nn.LayerNorm(4) for _ in range(3)])


def test_module_list_enumerate():
    class M(Stack3):
        def forward(self, x):
            for i, layer in enumerate(self.layers):
                x = layer(x) * (i + 1)
            return x
    mcheck(M(), r(2, 4), atol=1e-4, rtol=1e-4)


def test_module_list_int_index():
    class M(Stack3):
        def forward(self, x):
            return self.layers[0](x) + self.layers[-1](x)
    mcheck(M(), r(2, 4), atol=1e-4, rtol=1e-4)


def test_module_list_len():
    class M(Stack3):
        def forward(self, x):
            return x * len(self.layers)
    mcheck(M(), r(2, 4))


def test_module_list_zip():
    class M(Stack3):
        def forward(self, x):
            for lin, norm in zip(self.layers, self.norms):
                x = norm(lin(x))
            return x
    mcheck(M(), r(2, 4), atol=1e-4, rtol=1e-4)


def test_module_list_slice():
    class M(Stack3):
        def forward(self, x):
            for lin in self.layers[1:]:
                x = lin(x)
            return x
    mcheck(M(), r(2, 4), atol=1e-4, rtol=1e-4)


def test_module_int_attribute_and_parameters():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.k = 3
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            return self.lin(x) * self.k
    mcheck(M(), r(2, 4))


def test_module_dict_access():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.heads = nn.ModuleDict({"a": nn.Linear(4, 2), "b": nn.Linear(4, 3)})

        def forward(self, x, which):
            return self.heads[which](x)
    mcheck(M(), r(2, 4), "a")
    mcheck(M(), r(2, 4), "b")


def test_module_dict_items_loop():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.heads = nn.ModuleDict({"a": nn.Linear(4, 2), "b": nn.Linear(4, 3)})

        def forward(self, x):
            return {name: head(x) for name, head in self.heads.items()}
    mcheck(M(), r(2, 4))


def test_module_with_buffer():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("mean", torch.randn(4))
            self.register_buffer("scale", torch.rand(4) + 0.5)

        def forward(self, x):
            return (x - self.mean) * self.scale
    mcheck(M(), r(3, 4))


def test_module_parameter_used_directly():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(4, 4))
            self.alpha = 0.5

        def forward(self, x):
            return x @ self.w * self.alpha
    mcheck(M(), r(2, 4), atol=1e-4, rtol=1e-4)


class Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        if self.training:
            return self.lin(x) * 2
        return self.lin(x) * 3


def test_training_flag_branch_eval():
    mcheck(Branchy(), r(2, 4))


def test_training_flag_toggled_recompiles():
    m = Branchy()
    c = ember.compile(m)
    ember.metrics.reset()
    x = r(2, 4)
    with torch.no_grad():
        m.eval()
        same(c, m, x)
        m.train()
        same(c, m, x)
        m.eval()
        same(c, m, x)
    expect_frames(2, 0)


def test_super_forward_in_subclass():
    class Base(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            return self.lin(x).relu()

    class Child(Base):
        def forward(self, x):
            return super().forward(x) + 1

    mcheck(Child(), r(2, 4))


def test_subclass_of_linear_calls_super_forward():
    class MyLinear(nn.Linear):
        def forward(self, x):
            return super().forward(x) * 2
    mcheck(MyLinear(4, 3), r(2, 4))


def test_tied_weights():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(10, 4)
            self.out = nn.Linear(4, 10, bias=False)
            self.out.weight = self.emb.weight

        def forward(self, idx):
            return self.out(self.emb(idx))
    mcheck(Tied(), torch.tensor([[1, 2, 3]]), atol=1e-4, rtol=1e-4)


def test_same_submodule_used_twice():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            return self.lin(self.lin(x))
    mcheck(M(), r(2, 4))


def test_parameter_updated_in_place_between_calls():
    m = nn.Linear(4, 3)
    c = ember.compile(m)
    ember.metrics.reset()
    x = r(2, 4)
    with torch.no_grad():
        same(c, m, x)
        for p in m.parameters():
            p.add_(1)
        out = same(c, m, x)
        torch.testing.assert_close(out, x @ m.weight.t() + m.bias)
    expect_frames(1, 0)


def test_parameter_replaced_between_calls():
    m = nn.Linear(4, 3)
    c = ember.compile(m)
    ember.metrics.reset()
    x = r(2, 4)
    with torch.no_grad():
        same(c, m, x)
        m.weight = nn.Parameter(torch.randn(3, 4))
        same(c, m, x)
    assert ember.metrics.snapshot()["eager_frames"] == 0


def test_module_called_from_function():
    lin = nn.Linear(4, 4)

    def f(x):
        return lin(x).sigmoid() + lin.weight.sum()
    with torch.no_grad():
        check(f, r(2, 4))


def test_module_passed_as_argument():
    def f(mod, x):
        return mod(x) * 2
    with torch.no_grad():
        check(f, MLP(4, 8), r(2, 4))


def test_forward_with_kwargs_and_defaults():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x, scale=1.0, *, residual=True):
            y = self.lin(x) * scale
            return y + x if residual else y
    mcheck(M(), r(2, 4))
    mcheck(M(), r(2, 4), scale=2.0, residual=False)


def test_compiled_module_attributes_and_state_dict():
    m = MLP()
    c = ember.compile(m)
    assert c.fc1 is m.fc1
    assert set(c._orig_mod.state_dict()) == set(m.state_dict())


def test_transformer_like_block():
    class Attn(nn.Module):
        def __init__(self, d=8, heads=2):
            super().__init__()
            self.heads = heads
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(x).chunk(3, dim=-1)
            q, k, v = [z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v)]
            att = (q @ k.transpose(-2, -1)) * (1.0 / (d // self.heads) ** 0.5)
            att = att.softmax(dim=-1)
            y = (att @ v).transpose(1, 2).reshape(b, t, d)
            return self.proj(y)
    mcheck(Attn(), r(2, 3, 8), atol=1e-4, rtol=1e-4)


class Scale(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4))

    def forward(self, x):
        return x * self.w


def test_grad_mode_with_parameters_requiring_grad_is_captured_for_training():
    """Parameters require grad: under grad mode the frame is captured as a joint graph
    (tests/python/training/test_capture_training.py checks the gradients)."""
    check(Scale(), r(2, 4), captured=1, eager=0)


def _frames_in_subprocess(code):
    """Runs `code` in a fresh interpreter (these programs can leave torch code objects marked
    eager for the rest of the process) and returns what it prints: a JSON value."""
    prelude = "import json, torch, ember, torch.nn as nn\nx = torch.randn(2, 4)\n"
    out = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_grad_mode_linear_is_a_training_graph():
    snap, reasons = _frames_in_subprocess("""
        out = ember.compile(nn.Linear(4, 3))(x)
        out.sum().backward()
        print(json.dumps([ember.metrics.snapshot(), ember.metrics.fallback_reasons]))
    """)
    assert snap["eager_frames"] == 0 and snap["training_graphs"] == 1, (snap, reasons)


def test_eager_under_grad_mode_does_not_poison_later_compiles():
    snap = _frames_in_subprocess("""
        ember.compile(nn.Linear(4, 3))(x)
        ember.metrics.reset()
        with torch.no_grad():
            ember.compile(nn.Linear(4, 3))(x)
        print(json.dumps(ember.metrics.snapshot()))
    """)
    assert (snap["captured_frames"], snap["eager_frames"]) == (1, 0), snap


def test_eager_under_grad_mode_user_module_then_no_grad():
    class Scale2(Scale):
        def forward(self, x):
            return x * self.w + 1
    ember.compile(Scale2())(r(2, 4))  # grad mode: not captured
    ember.metrics.reset()
    with torch.no_grad():
        check(Scale2(), r(2, 4))


def test_replaced_parameter_and_submodule_are_seen():
    """Parameters and submodules are read from the module's registries on every call (not
    through nn.Module.__getattr__): a replaced weight or submodule is what the next call uses."""
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(4, 4)
            self.b = torch.nn.Linear(4, 4)

        def forward(self, x):
            return self.b(torch.relu(self.a(x)))

    m = M().eval()
    cm = ember.compile(m)
    x = torch.randn(2, 4)
    with torch.no_grad():
        torch.testing.assert_close(cm(x), m(x))
        m.a.weight = torch.nn.Parameter(torch.randn(4, 4))
        torch.testing.assert_close(cm(x), m(x))
        m.b = torch.nn.Linear(4, 4)
        torch.testing.assert_close(cm(x), m(x))
        del m.b.bias
        m.b.bias = None  # not a parameter any more: the guards see it
        torch.testing.assert_close(cm(x), m(x))


class _ConvBlock(nn.Sequential):
    """A Sequential subclass (like torchvision's Conv2dNormActivation)."""

    def __init__(self):
        super().__init__(nn.Linear(4, 4), nn.ReLU())


class _DenseBlock(nn.ModuleDict):
    """A ModuleDict subclass iterated with items() (like torchvision's DenseNet blocks)."""

    def __init__(self):
        super().__init__({"a": nn.Linear(4, 4), "b": nn.Linear(4, 4)})

    def forward(self, x):
        feats = [x]
        for _, layer in self.items():
            feats.append(layer(feats[-1]))
        return torch.cat(feats, 1)


class _Reversed(nn.Sequential):
    """Iterates itself in its own way: not read item by item."""

    def __iter__(self):
        return reversed(list(self._modules.values()))


def test_container_subclasses_are_followed():
    m = nn.Sequential(_ConvBlock(), _DenseBlock()).eval()
    with torch.no_grad():
        check(m, r(2, 4))


def test_container_subclass_with_own_iter_is_not_indexed():
    m = _Reversed(nn.Linear(4, 4), nn.Linear(4, 4)).eval()
    with torch.no_grad():
        out = ember.compile(m)(torch.ones(2, 4))
        torch.testing.assert_close(out, m(torch.ones(2, 4)))


class _Indexed(nn.Module):
    """Reads its containers by index and key: a ModuleList from the end, a ModuleDict by name."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])
        self.heads = nn.ModuleDict({"x": nn.Linear(4, 4), "y": nn.Linear(4, 4)})

    def forward(self, x):
        x = self.layers[-1](self.layers[0](x))
        return self.heads["y"](x) - self.heads["x"](x)


def test_items_of_module_containers_are_what_the_next_call_reads():
    """Note [Items of torch's module containers] (capture/guards/source.cpp): a container's items
    are read from its `_modules` as its own __getitem__ reads them, on every call: a Sequential
    by position (whatever its keys), a ModuleList by str(index), a ModuleDict by key. A module
    replaced, or the Sequential's order changed under other names, is what the next call uses."""
    from collections import OrderedDict

    seq = nn.Sequential(OrderedDict([("b", nn.Linear(4, 4)), ("r", nn.ReLU()),
                                     ("a", nn.Linear(4, 4))])).eval()
    cs = ember.compile(seq)
    ind = _Indexed().eval()
    ci = ember.compile(ind)
    x = r(2, 4)
    with torch.no_grad():
        for _ in range(2):
            torch.testing.assert_close(cs(x), seq(x))
            torch.testing.assert_close(ci(x), ind(x))
        seq[2] = nn.Linear(4, 4)  # the same type at that position: the same guards pass
        torch.testing.assert_close(cs(x), seq(x))
        for key in ("b", "r"):  # to the end: positions 0 and 1 hold the two Linears now
            seq._modules[key] = seq._modules.pop(key)
        assert [type(m) for m in seq] == [nn.Linear, nn.Linear, nn.ReLU]
        torch.testing.assert_close(cs(x), seq(x))
        ind.layers[2] = nn.Linear(4, 4)
        ind.heads["y"] = nn.Linear(4, 4)
        torch.testing.assert_close(ci(x), ind(x))
        del ind.layers[0]  # what was layers[1] is layers[0] now, under the key "0"
        torch.testing.assert_close(ci(x), ind(x))


class _Probes(nn.Module):
    """Asks hasattr of itself: a plain attribute, a property that raises AttributeError, a
    submodule, and a name a buffer may take later."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    @property
    def broken(self):
        raise AttributeError("raised inside the property")

    def forward(self, x):
        y = self.lin(x)
        if hasattr(self, "scale"):
            y = y * self.scale
        if hasattr(self, "broken"):
            y = y + 1
        if hasattr(self, "lin"):
            y = y - 1
        return y


def test_hasattr_of_a_module_follows_what_getattr_finds():
    """Note [hasattr of a module] (capture/guards/source.cpp): a module's hasattr guard is answered
    as object.__getattribute__ and nn.Module.__getattr__ answer it (a property raising
    AttributeError is missing; parameters, buffers and submodules are there), without raising:
    an attribute set, deleted or registered as a buffer later is seen by the next call."""
    m = _Probes().eval()
    cm = ember.compile(m)
    x = r(2, 4)
    with torch.no_grad():
        for _ in range(2):
            torch.testing.assert_close(cm(x), m(x))
        m.scale = 2.0
        torch.testing.assert_close(cm(x), m(x))
        del m.scale
        torch.testing.assert_close(cm(x), m(x))
        m.register_buffer("scale", torch.full((4,), 3.0))
        torch.testing.assert_close(cm(x), m(x))


def _checked_call(func):
    """A decorator whose wrapper closes over the function (like torch_geometric's
    disable_dynamic_shapes on Aggregation.__call__)."""
    def wrapper(*args, **kwargs):
        return func(*args, **kwargs)
    return wrapper


class _Aggregation(nn.Module):
    @_checked_call
    def __call__(self, x, dim=0):
        return super().__call__(x, dim=dim)

    def forward(self, x, dim=0):
        return x.sum(dim)


def test_decorated_call_override_with_closure():
    agg = _Aggregation()

    def f(x):
        return agg(x, dim=1) * 2
    check(f, r(3, 4))


class StoresItsTableBack(nn.Module):
    # transformers' CTRL: `self.pos_encoding = self.pos_encoding.to(device, dtype)` each call,
    # a plain tensor attribute that `.to` returns as it is.
    def __init__(self):
        super().__init__()
        self.table = torch.randn(16, 8)

    def forward(self, x):
        self.table = self.table.to(device=x.device, dtype=x.dtype)
        return x + self.table[: x.shape[0]]


def test_a_tensor_attribute_stored_back_unchanged_is_no_break():
    m = StoresItsTableBack()
    table = m.table
    mcheck(m, r(5, 8))
    assert m.table is table  # nothing was replaced


class StoresANewTable(StoresItsTableBack):
    def forward(self, x):
        self.table = self.table * 1.0  # a new tensor each call: a real store
        return x + self.table[: x.shape[0]]


def test_a_tensor_attribute_replaced_by_another_tensor_is_still_handled():
    # Not the object read back: still a graph break, and the attribute ends as in eager.
    m, e = StoresANewTable(), StoresANewTable()
    e.table = m.table.clone()
    cf = ember.compile(m)
    with torch.no_grad():
        for _ in range(2):
            x = r(5, 8)
            torch.testing.assert_close(cf(x), e(x))
    torch.testing.assert_close(m.table, e.table)
    assert m.table is not e.table


def _zeros_requiring_grad(q):
    return torch.zeros_like(q).requires_grad_()


def test_requires_grad_of_a_tensor_the_program_made_under_no_grad():
    # transformers' Mra without its CUDA kernel: `torch.zeros_like(query).requires_grad_()`.
    def f(x):
        y = _zeros_requiring_grad(x * 2)
        return y + x, y.requires_grad

    with torch.no_grad():
        check(f, r(3, 4))


def test_a_returned_tensor_made_to_require_grad_runs_eagerly():
    # The executor's outputs would not carry the flag: the frame runs as eager, flag and all.
    def f(x):
        return torch.zeros_like(x * 2).requires_grad_()

    cf = ember.compile(f)
    ember.metrics.reset()
    with torch.no_grad():
        out = cf(r(3))
    assert out.requires_grad
    expect_frames(0, 1, reason="requires_grad_")


def test_requires_grad_of_an_input_is_left_to_python():
    # A side effect on the caller's tensor: never run on a tracer.
    def f(x):
        x.requires_grad_()
        return x * 2

    cf = ember.compile(f)
    with torch.no_grad():
        x = r(3)
        cf(x)
    assert x.requires_grad


class _RnnBlock(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.norm = nn.LayerNorm(16)
        self.rnn = kind(16, 8, bidirectional=True, batch_first=True)
        self.fc = nn.Linear(16, 16)

    def forward(self, x):
        y, _ = self.rnn(self.norm(x))
        return x + self.fc(y)


class _RnnNet(nn.Module):
    def __init__(self, kind, n=10):
        super().__init__()
        self.blocks = nn.ModuleList(_RnnBlock(kind) for _ in range(n))

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x.mean()


@pytest.mark.parametrize("kind", [nn.LSTM, nn.GRU, nn.RNN])
def test_rnn_modules_run_outside_the_graph_without_a_recompile_per_layer(kind):
    # An RNN's forward reads its flat weights through weak references; inlined, each layer's
    # references were guarded by identity and every layer recompiled the block until the cache
    # limit (timm's sequencer2d: 40 breaks and a cache-limit warning). The module call runs
    # outside the graph, and the calls after the first compile nothing.
    m = _RnnNet(kind).eval()
    c = ember.compile(m)
    x = r(2, 5, 16)
    ember.metrics.reset()
    with torch.no_grad():
        torch.testing.assert_close(c(x), m(x))
        first = ember.metrics.snapshot()
        for _ in range(2):
            torch.testing.assert_close(c(x), m(x))
    after = ember.metrics.snapshot()
    assert after["graphs"] == first["graphs"]  # nothing recompiled
    assert first["graph_breaks"] == 10, ember.metrics.fallback_reasons
    assert all(f"an nn.{kind.__name__}" in reason for reason in ember.metrics.fallback_reasons)
