"""Tracing PyTorch code into an ember Graph, with ember's C++ tracer tensors.

`trace(fn, example_inputs)` runs `fn` once on tracer tensors (no data, no compute) and returns the
recorded ATen-level graph. `fn` may be any callable over tensors: a plain function, an nn.Module
(its parameters and buffers become inputs) or an FX GraphModule from Dynamo.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from . import _C
from .errors import CompileError, DataDependentError, Unsupported

Graph = _C.Graph

# What PyTorch says when code reads the data of a tensor without storage (a tracer tensor):
# `.tolist()`, `.numpy()`, `data_ptr()`.
_DATA_ACCESS_MESSAGES = ("unallocated storage", "doesn't have storage", "does not have storage")


def _identity_tuple(ts: tuple) -> tuple:
    """The rebuild of a program that returns a tuple of tensors: the graph's own output tuple."""
    return ts


def _flatten_outputs(out: Any) -> tuple[list[torch.Tensor], Callable[[Sequence[torch.Tensor]], Any]]:
    """Splits `out` into its tensors and a function that rebuilds the same structure."""
    if isinstance(out, torch.Tensor):
        return [out], lambda ts: ts[0]
    if isinstance(out, (tuple, list)):
        kinds = []
        tensors: list[torch.Tensor] = []
        for item in out:
            if isinstance(item, torch.Tensor):
                kinds.append(len(tensors))
                tensors.append(item)
            elif item is None or isinstance(item, (int, float, bool, str)):
                kinds.append(("const", item))
            else:
                raise Unsupported(f"output of type {type(item).__name__} is not supported")
        container = type(out)

        if container is tuple and all(isinstance(k, int) for k in kinds):
            return tensors, _identity_tuple  # what CompiledGraph already returns

        def rebuild(ts: Sequence[torch.Tensor]) -> Any:
            items = [ts[k] if isinstance(k, int) else k[1] for k in kinds]
            return container(items) if container in (tuple, list) else container(*items)

        return tensors, rebuild
    raise Unsupported(f"output of type {type(out).__name__} is not supported")


def trace_with_structure(fn: Callable, example_inputs: Sequence[Any], kinds: Sequence[str] | None = None,
                         names: Sequence[str] | None = None, device: str | None = None,
                         options: dict | None = None,
                         dynamic: Sequence[tuple[list[int], list[str]]] | None = None):
    """Traces `fn(*example_inputs)`; returns (graph, rebuild) where `rebuild` maps the graph's
    output tensors back to the structure `fn` returned. `device` makes the inputs' tracer tensors
    report that device (tests trace for "cuda:0" on a machine with no GPU). `options`:
    ember.config.compile_options() (None: the current ember.config). `dynamic`: per input, the
    dims whose size is a shape symbol and a key per dim (equal keys: one symbol)."""
    for i, x in enumerate(example_inputs):
        if not isinstance(x, torch.Tensor):
            raise CompileError(
                f"input {i} is a {type(x).__name__}; ember traces tensor inputs only "
                "(pass Python values through a closure, or compile through torch.compile)")
        if x.layout != torch.strided:
            raise Unsupported(f"input {i} has layout {x.layout}; only strided tensors are supported")
        if x.is_quantized or x.is_nested:
            raise Unsupported(f"input {i} is a quantized or nested tensor")
    session = _C.TraceSession(options=options)
    kinds = kinds or ["user"] * len(example_inputs)
    names = names or [f"arg{i}" for i in range(len(example_inputs))]
    dynamic = dynamic or [([], [])] * len(example_inputs)
    tracer_inputs = [session.add_input(x, k, n, device, dims, keys)
                     for x, k, n, (dims, keys) in zip(example_inputs, kinds, names, dynamic)]
    try:
        with torch.no_grad(), session:
            out = fn(*tracer_inputs)
            tensors, rebuild = _flatten_outputs(out)
            graph = session.finish(tensors)
    except Exception as e:
        session.rethrow_pending_error()  # keeps the ember error type PyTorch's bindings dropped
        if isinstance(e, RuntimeError) and any(m in str(e) for m in _DATA_ACCESS_MESSAGES):
            raise DataDependentError(
                f"the program reads the data of a traced tensor ({e}); "
                "tracing sees shapes and dtypes only") from e
        raise
    return graph, rebuild


def trace(fn: Callable, example_inputs: Sequence[Any], *, device: str | None = None,
          options: dict | None = None) -> Graph:
    """Traces `fn(*example_inputs)` into an ember Graph. nn.Module parameters and buffers are
    captured as constants. Raises DataDependentError for data-dependent ops (`.item()`,
    `.tolist()`, `nonzero`), Unsupported for what ember cannot trace yet. `device` ("cuda:0")
    traces as if the inputs were on that device: the graph the device's choices make, with no
    device needed (nothing runs). `options`: ember options by name, over ember.config (as
    ember.compile's `options=`)."""
    from . import config
    graph, _ = trace_with_structure(fn, example_inputs, device=device,
                                    options=config.compile_options(options))
    return graph


def _device_available(device: str) -> bool:
    kind = torch.device(device).type
    return kind == "cpu" or (kind == "cuda" and torch.cuda.is_available())


def trace_joint(fn: Callable, example_inputs: Sequence[torch.Tensor], requires_grad: Sequence[bool],
                kinds: Sequence[str] | None = None, names: Sequence[str] | None = None,
                device: str | None = None, options: dict | None = None,
                dynamic: Sequence[tuple[list[int], list[str]]] | None = None):
    """Traces `fn(*example_inputs)` and its backward into one joint graph: autograd runs on the
    tracer tensors (the inputs flagged in `requires_grad` require grad), and
    `torch.autograd.grad(outputs, those inputs, tangents)` records the backward ops. Returns
    (graph, rebuild, signature): the joint graph's non-constant inputs are the example inputs,
    then one tangent per differentiable output (floating and requiring grad); its outputs are
    fn's, then the new values of the inputs fn modified in place under grad mode (their indices
    in `signature["rebased_inputs"]`), then one gradient per input in `signature["grad_inputs"]`
    (inputs that the outputs do not reach get none). `signature` holds num_primals,
    num_forward_outputs, tangent_outputs, grad_inputs and rebased_inputs, as
    _C.CompiledFunction takes them (it returns fn's outputs only). `device` ("cuda:0") traces as
    if the inputs were on that device, as `trace` does (Note [Tracing for a device this torch
    lacks]); pass
    the result to `_C.split_training_graph`, then each side to `_C.triton_plan`. `dynamic`: per
    input, its dims that are shape symbols and their symbol keys, as `trace_with_structure` takes
    them; each tangent then has its output's symbolic sizes."""
    for i, x in enumerate(example_inputs):
        if not isinstance(x, torch.Tensor):
            raise CompileError(f"input {i} is a {type(x).__name__}; ember traces tensor inputs only")
    session = _C.TraceSession(options=options)
    kinds = kinds or ["user"] * len(example_inputs)
    names = names or [f"arg{i}" for i in range(len(example_inputs))]
    dynamic = dynamic or [([], [])] * len(example_inputs)
    symbolic = any(dims for dims, _ in dynamic)
    tracer_inputs = [session.add_input(x, k, n, device, dims, keys)
                     for x, k, n, (dims, keys) in zip(example_inputs, kinds, names, dynamic)]
    # Inputs that require grad: parameters are autograd leaves; any other input may stand for a
    # tensor autograd computed (an activation from the graph before), which the program may
    # modify in place (Note [Traced inputs modified in place], tracer/grad_inputs.h; a leaf the
    # program modifies raises at the call, before anything changes, as in eager).
    grad_inputs = _C.GradInputs()
    wanted = [i for i, r in enumerate(requires_grad) if r]
    try:
        with torch.enable_grad():
            for i in wanted:
                grad_inputs.add(tracer_inputs[i], kinds[i] == "parameter")
            with session:
                out = fn(*tracer_inputs)
                tensors, rebuild = _flatten_outputs(out)
            # Their values after the program: outputs too (their tangents' gradients flow back).
            rebased = [wanted[k] for k in grad_inputs.modified_in_place()]
            tensors = tensors + [tracer_inputs[i] for i in rebased]
            differentiable = [i for i, t in enumerate(tensors)
                              if t.requires_grad and (t.is_floating_point() or t.is_complex())]
            # Tangents are inputs like the others: real tensors stand for their metadata.
            if symbolic:  # the outputs' sizes, over the trace's symbols
                tangents = [session.add_input_like(tensors[i], "user", f"tangent{i}")
                            for i in differentiable]
            else:
                tangents = [session.add_input(torch.empty(tensors[i].shape, dtype=tensors[i].dtype,
                                                          device="cpu" if device else tensors[i].device),
                                              "user", f"tangent{i}", device)
                            for i in differentiable]
            with session:
                outs = [tensors[i] for i in differentiable]
                if not differentiable:
                    grads = []
                else:
                    # Note [A backward without autograd's engine] where the device is absent
                    walk = device is not None and not _device_available(device)
                    grads = grad_inputs.gradients(outs, tangents, walk)
                kept = [(i, g) for i, g in zip(wanted, grads) if g is not None]
                graph = session.finish(tensors + [g for _, g in kept])
    except Exception as e:
        session.rethrow_pending_error()
        if isinstance(e, RuntimeError) and any(m in str(e) for m in _DATA_ACCESS_MESSAGES):
            raise DataDependentError(
                f"the program reads the data of a traced tensor ({e}); "
                "tracing sees shapes and dtypes only") from e
        raise
    signature = {"num_primals": len(example_inputs), "num_forward_outputs": len(tensors),
                 "tangent_outputs": differentiable, "grad_inputs": [i for i, _ in kept],
                 "rebased_inputs": rebased}
    return graph, rebuild, signature
