"""Guard discipline, one guard kind at a time: a fresh object of an equal value hits the cache,
a changed value recompiles, and every call matches eager.

- Immutable values (torch.device, dtype, Size, enum members, frozen dataclasses, tuples of
  these) are guarded by value: a property that makes a new torch.device per read (transformers'
  `PreTrainedModel.device`) does not recompile.
- nn.Modules and objects of the program's classes are guarded by type and what the capture read
  of them: one compiled frame serves every layer of a class, and objects made per call (caches,
  configs) do not recompile. Where the trace depends on an object's identity (a dict key, `is`,
  code that runs for real with it) the object is pinned: guarded by identity.
"""

from __future__ import annotations

import dataclasses
import enum

import pytest
import torch

from capture_check import expect_frames, same

import ember


def r(*shape):
    return torch.randn(*shape)


def compiled(fn):
    c = ember.compile(fn)
    ember.metrics.reset()
    return c


def frames_compiled():
    return ember.metrics.snapshot()["captured_frames"]


# --- immutable values: by value -----------------------------------------------------------


class DeviceProperty(torch.nn.Module):
    """A module whose `device` property makes a new torch.device on every read."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.where = "cpu"

    @property
    def device(self):
        return torch.device(self.where)

    def forward(self, x):
        return self.lin(x) + torch.ones(4, device=self.device)


def test_device_from_a_property_is_guarded_by_value():
    m = DeviceProperty().eval()
    c = compiled(m)
    with torch.no_grad():
        for _ in range(3):
            same(c, m, r(2, 4))
    expect_frames(1, 0)


def test_changed_device_value_recompiles():
    def f(x, device):
        return x + torch.ones(3, device=device)
    c = compiled(f)
    same(c, f, r(3), torch.device("cpu"))
    same(c, f, r(3), torch.device("cpu"))  # a new, equal object
    assert frames_compiled() == 1
    same(c, f, r(3), torch.device("cpu", 0))
    assert frames_compiled() == 2


def test_dtype_and_size_by_value():
    def f(x, dtype, size):
        return x.to(dtype).reshape(size) * 2
    c = compiled(f)
    same(c, f, r(6), torch.float64, torch.Size([2, 3]))
    same(c, f, r(6), torch.float64, torch.Size([2, 3]))  # a new Size object
    assert frames_compiled() == 1
    same(c, f, r(6), torch.float64, torch.Size([3, 2]))
    same(c, f, r(6), torch.float16, torch.Size([3, 2]))
    assert frames_compiled() == 3


class Mode(enum.Enum):
    ADD = "add"
    MUL = "mul"


def test_enum_member_by_value():
    def f(x, mode):
        return x + 2 if mode is Mode.ADD else x * 2
    c = compiled(f)
    same(c, f, r(3), Mode.ADD)
    same(c, f, r(3), Mode.ADD)
    assert frames_compiled() == 1
    same(c, f, r(3), Mode.MUL)
    same(c, f, r(3), Mode.ADD)
    assert frames_compiled() == 2


@dataclasses.dataclass(frozen=True)
class FrozenCfg:
    scale: float
    act: str
    dtype: torch.dtype = torch.float32


def test_frozen_dataclass_by_value():
    def f(x, cfg):
        y = x.to(cfg.dtype) * cfg.scale
        return y.relu() if cfg.act == "relu" else y.tanh()
    c = compiled(f)
    for _ in range(3):
        same(c, f, r(4), FrozenCfg(2.0, "relu"))  # a new, equal config per call
    assert frames_compiled() == 1
    same(c, f, r(4), FrozenCfg(3.0, "relu"))
    same(c, f, r(4), FrozenCfg(3.0, "tanh"))
    same(c, f, r(4), FrozenCfg(3.0, "tanh", torch.float64))
    assert frames_compiled() == 4


def test_tuple_of_values_by_value():
    def f(x, spec):
        dtype, mode = spec
        return x.to(dtype) * (2 if mode is Mode.MUL else 1)
    c = compiled(f)
    same(c, f, r(3), (torch.float64, Mode.MUL))
    same(c, f, r(3), (torch.float64, Mode.MUL))
    assert frames_compiled() == 1
    same(c, f, r(3), (torch.float64, Mode.ADD))
    assert frames_compiled() == 2


# --- modules: by type and the attributes read ---------------------------------------------


class Block(torch.nn.Module):
    def __init__(self, scale=1.0):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.scale = scale

    def forward(self, x):
        return self.lin(x).relu() * self.scale


class OtherBlock(Block):
    pass


def test_one_compiled_frame_serves_every_module_of_a_class():
    def f(block, x):
        return block(x) + 1
    blocks = [Block() for _ in range(4)]  # different parameters, same class and attributes
    c = compiled(f)
    with torch.no_grad():
        for b in blocks + blocks:
            same(c, f, b, r(2, 4))
    assert frames_compiled() == 1
    expect_frames(1, 0)


def test_module_of_another_class_or_attribute_recompiles():
    def f(block, x):
        return block(x)
    c = compiled(f)
    with torch.no_grad():
        same(c, f, Block(), r(2, 4))
        same(c, f, Block(scale=3.0), r(2, 4))  # an attribute the capture read differs
        same(c, f, OtherBlock(), r(2, 4))  # another class
    assert frames_compiled() == 3


def test_layers_of_a_class_after_a_graph_break_compile_once():
    # Each layer's forward is a frame of its own (its caller runs eagerly): one entry serves all
    # of them, where an identity guard compiled one per layer.
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = torch.nn.ModuleList(Block() for _ in range(4))

        def forward(self, x):
            for b in self.blocks:
                try:  # no graph break inside a try block: this frame runs eagerly
                    print("", end="")
                except OSError:
                    pass
                x = b(x)
            return x

    net = Net().eval()
    c = ember.compile(net)
    with torch.no_grad():
        c(r(2, 4))
        ember.metrics.reset()
        for _ in range(3):
            same(c, net, r(2, 4))
    assert frames_compiled() == 0  # no recompiles on later calls
    forwards = [rec for rec in ember.capture.records() if "Block.forward" in rec["code"]]
    assert len(forwards) == 1


def test_changed_registry_recompiles():
    # A frame compiled for one instance runs for another of the class only if that one reads
    # the same: a changed registry (a parameter replaced by None) recompiles.
    def f(block, x):
        return block(x)
    a, b = Block(), Block()
    b.lin.bias = None
    c = compiled(f)
    with torch.no_grad():
        same(c, f, a, r(2, 4))
        same(c, f, b, r(2, 4))
    assert frames_compiled() == 2


# --- objects of the program's classes -----------------------------------------------------


class Layer:
    def __init__(self, k):
        self.k = k


class Cache:
    """A cache made per call, holding objects of another class (transformers' DynamicCache)."""

    def __init__(self, n):
        self.layers = [Layer(i + 1) for i in range(n)]

    def __len__(self):
        return len(self.layers)


def test_objects_made_per_call_hit_the_cache():
    def f(x, cache):
        for layer in cache.layers:
            x = x * layer.k
        return x + len(cache)
    c = compiled(f)
    for _ in range(3):
        same(c, f, r(3), Cache(2))
    assert frames_compiled() == 1
    same(c, f, r(3), Cache(3))  # a different length recompiles
    assert frames_compiled() == 2


def test_identity_the_trace_depends_on_is_pinned():
    default = Layer(5)

    def f(x, layer):
        if layer is default:
            return x * 100
        table = {layer: 2}
        return x * table[layer] * layer.k
    c = compiled(f)
    same(c, f, r(3), Layer(5))
    same(c, f, r(3), default)  # `is` reads the identity: not the first entry
    same(c, f, r(3), Layer(5))
    assert frames_compiled() == 3  # each object its own entry


def test_missing_attribute_is_guarded_on_objects_of_a_class():
    def f(x, obj):
        return x * getattr(obj, "k", 10) + (1 if hasattr(obj, "extra") else 0)
    with_k, without = Layer(2), Layer(3)
    del without.k
    with_extra = Layer(2)
    with_extra.extra = True
    c = compiled(f)
    same(c, f, r(3), with_k)
    same(c, f, r(3), without)
    same(c, f, r(3), with_extra)
    same(c, f, r(3), Layer(2))
    assert frames_compiled() == 3


def test_object_passed_to_code_that_runs_for_real_is_pinned():
    # repr() reads the object without guards: a new object recompiles rather than reusing a
    # string made from another one.
    class Named:
        def __init__(self, name):
            self.name = name

        def __repr__(self):
            return f"Named({self.name})"

    def f(x, obj):
        return x * len(repr(obj))
    c = compiled(f)
    same(c, f, r(3), Named("a"))
    same(c, f, r(3), Named("abcdef"))
    assert frames_compiled() == 2


class _Reversible(torch.autograd.Function):
    """A Function whose forward records on its ctx (transformers' Reformer): saved tensors,
    non-differentiable outputs, and plain attributes."""

    @staticmethod
    def forward(ctx, x, layers, scale):
        h = x
        for layer in layers:
            h = layer(h)
        ctx.save_for_backward(h.detach(), x.detach())
        ctx.mark_non_differentiable()
        ctx.set_materialize_grads(False)
        ctx.layers = layers
        ctx.scale = scale
        return torch.cat([h, x], -1) * scale

    @staticmethod
    def backward(ctx, g):
        h, x = ctx.saved_tensors
        return g[..., :4] * ctx.scale, None, None


class _WithFunction(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(2)])

    def forward(self, x):
        return _Reversible.apply(x, self.layers, 2.0) + 1


def test_a_functions_ctx_is_never_guarded_by_identity():
    # Note [A Function's ctx]: Function.apply makes a ctx per call; a frame compiled for the
    # forward records on it through stores replayed on each call's ctx, so the second and third
    # calls hit the cache (they recompiled on "L['ctx'] is not the object seen when compiling").
    m = _WithFunction().eval()
    c = compiled(m)
    with torch.no_grad():
        for _ in range(3):
            same(c, m, r(2, 4))
        first = frames_compiled()
        for _ in range(3):
            same(c, m, r(2, 4))
    assert frames_compiled() == first
    forward_frames = [rec for rec in ember.capture.records()
                      if "_Reversible.forward" in rec["code"] and rec["captured"]]
    assert len(forward_frames) == 1, [rec["code"] for rec in ember.capture.records()]
    assert "L['ctx'] is" not in forward_frames[0]["guard_text"]


def _scaled(k):
    def inner(x):
        return x * k
    return inner


def _shifted(k):
    def inner(x):
        return x + k
    return inner


def test_closures_made_per_call_are_guarded_by_code_and_cells():
    # Note [Functions by their code]: a factory's closure is a new object per call (transformers'
    # mask functions); guarded by its code, globals, defaults and the cells it read, an equal
    # closure hits the cache, and another code or cell value recompiles.
    def f(x, fns):
        for fn in fns:
            x = fn(x)
        return x

    c = compiled(f)
    for _ in range(3):
        same(c, f, r(3), (_scaled(2.0), _shifted(1.0)))
    assert frames_compiled() == 1
    same(c, f, r(3), (_scaled(3.0), _shifted(1.0)))  # a cell's value: by value (a float)
    assert frames_compiled() == 2
    same(c, f, r(3), (_shifted(2.0), _shifted(1.0)))  # another code
    assert frames_compiled() == 3
    same(c, f, r(3), (_scaled(2.0), _shifted(1.0)))  # the first entry again
    assert frames_compiled() == 3


def test_a_closure_whose_identity_the_trace_depends_on_is_pinned():
    def f(x, fn, table):
        return fn(x) * table[fn]

    c = compiled(f)
    g = _scaled(2.0)
    same(c, f, r(3), g, {g: 3})
    h = _scaled(2.0)
    same(c, f, r(3), h, {h: 4})  # a dict keyed by the function: identity pinned
    assert frames_compiled() == 2


def test_a_decorated_closure_keeps_its_identity_guard():
    # functools.wraps gives the wrapper attributes (__wrapped__) a trace could read without a
    # guard: such functions stay guarded by identity.
    import functools

    def deco(g):
        @functools.wraps(g)
        def wrapper(x):
            return g(x) + 1
        return wrapper

    def f(x, fn):
        return fn(x)

    c = compiled(f)
    same(c, f, r(3), deco(torch.sin))
    same(c, f, r(3), deco(torch.cos))
    assert frames_compiled() == 2


# --- library code followed -----------------------------------------------------------------


class NoGradForward(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("inv", torch.arange(1.0, 5.0))

    @torch.no_grad()
    def forward(self, x):
        return x * self.inv


def test_no_grad_decorated_forward_is_captured_in_the_graph():
    class Outer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rot = NoGradForward()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            return self.lin(self.rot(x))

    m = Outer().eval()
    c = compiled(m)
    with torch.no_grad():
        for _ in range(3):
            same(c, m, r(2, 4))
    expect_frames(1, 0)
    assert ember.metrics.snapshot()["graph_breaks"] == 0


@pytest.mark.parametrize("index", [
    [0, 2],
    [True, False, True],
    (Ellipsis, [1], slice(None)),
    (slice(None), [[0, 1], [1, 0]]),
    ([0, 1], [1, 2]),
])
def test_list_indices_are_constants_of_the_graph(index):
    def f(x):
        return x[index] * 2
    c = compiled(f)
    for _ in range(2):
        same(c, f, r(3, 3, 3))
    expect_frames(1, 0)


def test_list_index_store():
    def f(x):
        y = x.clone()
        y[[0, 2]] = 0.0
        return y
    c = compiled(f)
    same(c, f, r(3, 4))
    expect_frames(1, 0)


def test_nested_list_at_top_level_is_a_tuple_index():
    # torch reads x[[[0, 1], [1, 0]]] as x[[0, 1], [1, 0]] (numpy's legacy rule): left to torch.
    def f(x):
        return x[[0, 1], [1, 0]] + 1
    c = compiled(f)
    same(c, f, r(3, 3))
    expect_frames(1, 0)


# --- the cache-size limit ------------------------------------------------------------------


def test_past_the_limit_the_frame_runs_eagerly_with_one_warning(monkeypatch, recwarn):
    monkeypatch.setattr(ember.config, "cache_size_limit", 3)

    def f(x, n):
        return x * n
    c = compiled(f)
    for n in range(6):
        same(c, f, r(3), n)
    same(c, f, r(3), 0)  # compiled before the limit: runs eagerly too
    warned = [w for w in recwarn.list if "cache size limit" in str(w.message)]
    assert len(warned) == 1
    assert "cache_size_limit" in str(warned[0].message)
    assert "L['n'] == " in str(warned[0].message)  # the guard that failed last
    assert frames_compiled() == 3


def test_cache_size_limit_must_be_a_non_negative_int(monkeypatch):
    monkeypatch.setattr(ember.config, "cache_size_limit", -1)
    with pytest.raises(ember.CompileError, match="cache_size_limit"):
        ember.compile(lambda x: x)
