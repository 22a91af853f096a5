"""The torch.compile backend: `torch.compile(model, backend="ember")`.

Dynamo captures the Python program and hands each FX GraphModule to `backend`. ember runs the
GraphModule on its C++ tracer tensors, which records an ATen-level functional graph, and returns a
C++ CompiledGraph that runs it. Anything ember cannot compile runs eagerly, with the reason logged
and counted in ember.metrics.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Sequence

import torch

from . import _C, config, metrics
from .errors import InternalError, Unsupported
from .tracing import _flatten_outputs, _identity_tuple, trace_joint, trace_with_structure

log = logging.getLogger("ember")


def _fallback(gm: torch.fx.GraphModule, reason: str) -> Callable:
    metrics.counters["fallbacks"] += 1
    metrics.fallback_reasons.append(reason)
    log.warning("ember: running a graph eagerly: %s", reason)
    return gm.forward


# Higher-order ops whose eager implementation runs their subgraphs with Dynamo or a dispatch
# mode, which tracing cannot enter: a graph holding one runs eagerly.
_CONTROL_FLOW_OPS = frozenset({"cond", "while_loop", "while_loop_stack_output", "scan", "map_impl",
                               "associative_scan"})


def _placeholder_value(node: torch.fx.Node) -> Any:
    return node.meta.get("example_value", node.meta.get("val"))


def _symbolic_inputs(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]):
    """What Dynamo's dynamic shapes made symbolic: per example input, its symbolic dims and their
    symbol names (`([dims], [keys])`), and for each int input (a SymInt placeholder) the
    (tensor input, dim) whose size it is. Raises Unsupported for a size that is an expression
    rather than a symbol, and for an int input that is no tensor input's size."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(example_inputs):
        raise Unsupported(f"{len(example_inputs)} example inputs for {len(placeholders)} "
                          "placeholders")
    dynamic = [([], []) for _ in example_inputs]
    where: dict[str, tuple[int, int]] = {}
    for i, (node, x) in enumerate(zip(placeholders, example_inputs)):
        val = _placeholder_value(node)
        if not (isinstance(x, torch.Tensor) and isinstance(val, torch.Tensor)):
            continue
        for d, size in enumerate(val.shape):
            if not isinstance(size, torch.SymInt):
                continue
            expr = size.node.expr
            if expr.is_number:  # specialized by Dynamo, which guards it
                continue
            if not expr.is_Symbol:
                raise Unsupported(f"input '{node.name}' has the size {expr} in dim {d} (an "
                                  "expression of symbols; ember takes symbols as sizes)")
            dynamic[i][0].append(d)
            dynamic[i][1].append(str(expr))
            where.setdefault(str(expr), (i, d))
    ints: dict[int, tuple[int, int]] = {}
    for i, (node, x) in enumerate(zip(placeholders, example_inputs)):
        if isinstance(x, torch.Tensor):
            continue
        val = _placeholder_value(node)
        name = str(val.node.expr) if isinstance(val, torch.SymInt) else None
        # An int that is no tensor's size (a dynamic Python int argument): None, compiled per
        # value (_per_size).
        ints[i] = where.get(name) if name is not None else None
    return dynamic, ints


def _unsupported_reason(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> str | None:
    for node in gm.graph.nodes:
        if (node.op == "call_function" and isinstance(node.target, torch._ops.HigherOrderOperator)
                and node.target.name() in _CONTROL_FLOW_OPS):
            return (f"the graph holds torch.{node.target.name()} (a control-flow higher-order op, "
                    "not compiled by ember yet)")
    return None


def _build_or_fallback(gm: torch.fx.GraphModule, build: Callable[[], tuple]) -> tuple | Callable:
    """build()'s (graph, rebuild, compiled), or eager's callable when ember cannot compile: an
    Unsupported program, or an op that failed while tracing (eager raises the same error).
    Internal errors propagate."""
    try:
        return build()
    except InternalError:
        raise
    except Unsupported as e:
        return _fallback(gm, str(e))
    except Exception as e:
        return _fallback(gm, f"tracing failed: {type(e).__name__}: {e}")


def _input_kinds(gm: torch.fx.GraphModule, example_inputs: Sequence[torch.Tensor]):
    names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    if len(names) != len(example_inputs):
        names = [f"arg{i}" for i in range(len(example_inputs))]
    kinds = []
    for name, x in zip(names, example_inputs):
        if isinstance(x, torch.nn.Parameter):
            kinds.append("param")
        elif "_buffers_" in name:
            kinds.append("buffer")
        else:
            kinds.append("user")
    return kinds, names


def backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **kwargs) -> Callable:
    """A torch.compile backend. Returns a callable that runs `gm` compiled by ember, or `gm`
    itself (eager) when ember cannot compile it."""
    reason = _unsupported_reason(gm, example_inputs)
    if reason is not None:
        return _fallback(gm, reason)
    # torch.compile(..., mode=..., options={...}) passes its mode (unless "default") and options
    # here: ember.config under them, as under ember.compile's.
    options = config.compile_options(
        config.mode_and_options(kwargs.get("mode"), kwargs.get("options"),
                                'torch.compile(backend="ember")'))
    try:
        dynamic, ints = _symbolic_inputs(gm, example_inputs)
    except Unsupported as e:
        return _fallback(gm, str(e))
    if ints or any(dims for dims, _ in dynamic):
        return _compile_dynamic(gm, example_inputs, dynamic, ints, options)
    kinds, names = _input_kinds(gm, example_inputs)
    attrs = _tensor_attributes(gm)
    if attrs:
        return _with_attributes_lifted(gm, example_inputs, kinds, names, attrs, options)
    return _compile(gm, gm, example_inputs, kinds, names, options)


def _count_graph(graph: Any, compiled: Any) -> None:
    """ember.metrics' counters for one compiled graph."""
    metrics.counters["graphs"] += 1
    metrics.counters["nodes"] += graph.num_nodes
    metrics.counters["kernels"] += compiled.num_kernels
    metrics.counters["fused_nodes"] += compiled.num_fused_nodes
    metrics.counters["extern_steps"] += compiled.num_extern_steps
    metrics.counters["fused_attention"] += compiled.num_fused_attention
    metrics.counters["causal_attention"] += compiled.num_causal_attention
    metrics.counters["folded_nodes"] += compiled.num_folded_nodes
    metrics.counters["view_steps"] += compiled.num_view_steps


def _compile_dynamic(gm: torch.fx.GraphModule, example_inputs: Sequence[Any],
                     dynamic: list[tuple[list[int], list[str]]], ints: dict[int, tuple[int, int]],
                     options: dict) -> Callable:
    """A graph of Dynamo's dynamic shapes: its symbolic dims become ember's shape symbols (one per
    Dynamo symbol), its int inputs the tracer tensors' symbolic sizes, and the compiled graph
    takes the tensors only. A call whose sizes break a relation ember's trace relied on (a size
    guard Dynamo did not make) runs eagerly."""
    if _tensor_attributes(gm):
        return _fallback(gm, "a graph with tensor attributes and dynamic shapes")
    # Dynamo's dynamic floats (specialize_float=False): a Python float (a LayerNorm's eps) comes
    # in as a 0-dim tensor read by .item(). ember traces its value as a constant and checks it
    # per call: a call with another value runs eagerly.
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    scalars = {i: x.item() for i, (node, x) in enumerate(zip(placeholders, example_inputs))
               if isinstance(x, torch.Tensor) and x.dim() == 0 and node.users
               and all(u.op == "call_method" and u.target == "item" for u in node.users)}
    tensor_pos = [i for i, x in enumerate(example_inputs)
                  if isinstance(x, torch.Tensor) and i not in scalars]
    tensors = [example_inputs[i] for i in tensor_pos]
    kinds, names = _input_kinds(gm, tensors)
    pos_of = {i: k for k, i in enumerate(tensor_pos)}

    def traced(*tracer_tensors: torch.Tensor) -> Any:
        args = []
        for i in range(len(example_inputs)):
            if i in ints:
                j, d = ints[i]
                args.append(tracer_tensors[pos_of[j]].shape[d])
            elif i in scalars:
                args.append(example_inputs[i])
            else:
                args.append(tracer_tensors[pos_of[i]])
        return gm(*args)

    def build():
        graph, rebuild = trace_with_structure(traced, tensors, kinds, names, options=options,
                                              dynamic=[dynamic[i] for i in tensor_pos])
        return graph, rebuild, _C.CompiledGraph(graph, options=options)

    if any(v is None for v in ints.values()):
        return _per_size(gm, example_inputs, tensor_pos, ints, scalars, options,
                         "an int input that is no tensor's size")
    if torch.is_grad_enabled() and any(example_inputs[i].requires_grad for i in tensor_pos):
        return _training_dynamic(gm, traced, example_inputs, tensor_pos, ints, scalars, kinds,
                                 names, [dynamic[i] for i in tensor_pos], options)
    try:
        built = build()
    except InternalError:
        raise
    except Exception as e:  # Unsupported, or an op that failed on symbolic sizes
        return _per_size(gm, example_inputs, tensor_pos, ints, scalars, options,
                         f"{type(e).__name__}: {e}" if not isinstance(e, Unsupported) else str(e))
    graph, rebuild, compiled = built
    if compiled.has_mutations:
        return _per_size(gm, example_inputs, tensor_pos, ints, scalars, options,
                         "a graph that mutates its inputs")
    _count_graph(graph, compiled)
    metrics.counters["dynamic_graphs"] += 1
    if compiled.symbolic_fallback:
        # Correct at every size, but its kernels are compiled once per new size.
        metrics.counters["per_size_graphs"] += 1
        log.info("ember: a graph with symbolic sizes is %s", compiled.symbolic_fallback)
    guards = _C.size_guards(graph)
    log.debug("ember: compiled a graph of %d nodes with symbolic sizes; size guards: %s\n%s",
              graph.num_nodes, guards or "none", graph)
    return _guarded(gm, compiled, rebuild, tensor_pos, scalars, guards)


def _guarded(gm: torch.fx.GraphModule, compiled: Any, rebuild: Callable, tensor_pos: list[int],
             scalars: dict[int, float], guards: list[str]) -> Callable:
    """A symbolic graph's runner (a CompiledGraph or a CompiledFunction): a call whose sizes break
    a size guard ember's trace relied on, or whose traced scalar changed, runs eagerly."""
    def run(*args: Any) -> Any:
        call = [args[i] for i in tensor_pos]
        if guards and not compiled.size_guards_hold(call):
            metrics.counters["size_guard_failures"] += 1
            return gm(*args)
        for i, v in scalars.items():
            if args[i].item() != v:
                metrics.counters["scalar_guard_failures"] += 1
                return gm(*args)
        return rebuild(compiled(*call))
    return run


def _training_dynamic(gm: torch.fx.GraphModule, traced: Callable, example_inputs: Sequence[Any],
                      tensor_pos: list[int], ints: dict[int, tuple[int, int]],
                      scalars: dict[int, float], kinds: list[str], names: list[str],
                      dynamic: list[tuple[list[int], list[str]]], options: dict) -> Callable:
    """A training graph of Dynamo's dynamic shapes: the joint graph traced over ember's shape
    symbols (tangents in the outputs' symbols), split and compiled once; a call whose sizes break a
    relation the trace relied on runs eagerly, as in _compile_dynamic."""
    tensors = [example_inputs[i] for i in tensor_pos]
    requires_grad = [x.requires_grad for x in tensors]

    def build():
        graph, rebuild, sig = trace_joint(traced, tensors, requires_grad, kinds, names,
                                          options=options, dynamic=dynamic)
        compiled = _C.CompiledFunction(
            graph, sig["num_primals"], sig["num_forward_outputs"], sig["tangent_outputs"],
            sig["grad_inputs"], options=options, rebased_inputs=sig["rebased_inputs"])
        compiled.set_eager_backward(_eager_backward(traced, sig))
        return graph, rebuild, compiled

    try:
        graph, rebuild, compiled = build()
    except InternalError:
        raise
    except Exception as e:  # Unsupported, or an op that failed on symbolic sizes
        return _per_size(gm, example_inputs, tensor_pos, ints, scalars, options,
                         f"{type(e).__name__}: {e}" if not isinstance(e, Unsupported) else str(e))
    metrics.counters["graphs"] += 1
    metrics.counters["training_graphs"] += 1
    metrics.counters["dynamic_graphs"] += 1
    metrics.counters["nodes"] += graph.num_nodes
    metrics.counters["kernels"] += compiled.num_kernels
    guards = _C.size_guards(graph)
    log.debug("ember: compiled a joint graph of %d nodes with symbolic sizes; size guards: %s\n%s",
              graph.num_nodes, guards or "none", graph)
    return _guarded(gm, compiled, rebuild, tensor_pos, scalars, guards)


def _per_size(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], tensor_pos: list[int],
              ints: dict[int, tuple[int, int]], scalars: dict[int, float], options: dict,
              reason: str) -> Callable:
    """Dynamo's symbolic graph compiled with static shapes, once per distinct set of sizes (and
    int and scalar inputs): what ember cannot trace symbolically still runs compiled, never
    eagerly for that reason alone."""
    metrics.counters["per_size_graphs"] += 1
    log.info("ember: a graph with symbolic sizes is compiled per size: %s", reason)
    cache: dict[tuple, Callable] = {}
    kinds, names = _input_kinds(gm, [example_inputs[i] for i in tensor_pos])

    def key_of(args: Sequence[Any]) -> tuple:
        return tuple(tuple(a.shape) + tuple(a.stride()) if i in tensor_pos and i not in scalars
                     else a.item() if i in scalars else a for i, a in enumerate(args))

    def compiled_for(args: Sequence[Any]) -> Callable:
        values = {i: args[i] for i in range(len(args)) if i not in tensor_pos or i in scalars}

        def fn(*tensors: torch.Tensor) -> Any:
            full, k = [], 0
            for i in range(len(args)):
                if i in values:
                    full.append(values[i])
                else:
                    full.append(tensors[k])
                    k += 1
            return gm(*full)

        positions = [i for i in tensor_pos if i not in scalars]
        inner = _compile(gm, fn, [args[i] for i in positions], kinds, names, options)
        if inner == gm.forward:
            return gm
        return lambda *call: inner(*[call[i] for i in positions])

    def run(*args: Any) -> Any:
        key = key_of(args)
        entry = cache.get(key)
        if entry is None:
            entry = cache[key] = compiled_for(args)
        return entry(*args)
    return run


def _tensor_attributes(gm: torch.fx.GraphModule) -> list[tuple[str, torch.Tensor]]:
    """The tensors the graph reads as attributes (get_attr nodes), with their paths."""
    out = []
    for node in gm.graph.nodes:
        if node.op != "get_attr":
            continue
        value = gm
        for part in node.target.split("."):
            value = getattr(value, part)
        if isinstance(value, torch.Tensor) and all(node.target != p for p, _ in out):
            out.append((node.target, value))
    return out


def _with_attributes_lifted(gm: torch.fx.GraphModule, example_inputs: Sequence[torch.Tensor],
                            kinds: list[str], names: list[str],
                            attrs: list[tuple[str, torch.Tensor]], options: dict) -> Callable:
    """Tensors the graph reads as attributes (Dynamo installs an optimizer's parameters and state
    so) become inputs after the graph's own, as AOTAutograd lifts them: their in-place updates
    are then the graph's input mutations, and each call passes the live tensors."""
    n = len(example_inputs)
    tensors = [t for _, t in attrs]

    def traced(*args: torch.Tensor) -> Any:
        # The attributes are the tracer tensors while the graph runs on them.
        saved = []
        try:
            for (path, _), t in zip(attrs, args[n:]):
                owner, _, name = path.rpartition(".")
                mod = gm.get_submodule(owner) if owner else gm
                table = next((d for d in (mod._parameters, mod._buffers) if name in d),
                             mod.__dict__)
                saved.append((table, name, table[name]))
                table[name] = t
            return gm(*args[:n])
        finally:
            for table, name, old in reversed(saved):
                table[name] = old

    all_kinds = kinds + ["param" if isinstance(t, torch.nn.Parameter) else "buffer"
                         for t in tensors]
    all_names = names + [f"attr_{path}" for path, _ in attrs]
    inner = _compile(gm, traced, list(example_inputs) + tensors, all_kinds, all_names, options)
    if inner == gm.forward:  # a fallback: eager runs the graph as Dynamo made it
        return inner

    def run(*args: torch.Tensor) -> Any:
        return inner(*args, *tensors)
    return run


def _compile(gm: torch.fx.GraphModule, fn: Callable, example_inputs: Sequence[torch.Tensor],
             kinds: list[str], names: list[str], options: dict) -> Callable:
    """`fn` (gm, or gm with lifted attributes) compiled for `example_inputs` with `options`
    (ember.config.compile_options()), or gm's eager
    forward with a logged reason."""
    n_gm = len([p for p in gm.graph.nodes if p.op == "placeholder"])
    if torch.is_grad_enabled() and any(x.requires_grad for x in example_inputs):
        return _training(gm, fn, example_inputs, kinds, names, options)

    def build():
        graph, rebuild = trace_with_structure(fn, example_inputs, kinds, names, options=options)
        return graph, rebuild, _C.CompiledGraph(graph, options=options)

    built = _build_or_fallback(gm, build)
    if callable(built):
        return built
    graph, rebuild, compiled = built
    if compiled.has_mutations and compiled.mutated_inputs_alias(list(example_inputs)):
        return _fallback(gm, "an input that the graph mutates shares memory with another input")
    _count_graph(graph, compiled)
    for note in compiled.refused_kernels:
        metrics.counters["codegen_notes"] += 1
        metrics.fallback_reasons.append(f"not generated: {note}")
        log.info("ember: a kernel runs as ATen calls: %s", note)
    if compiled.codegen_error:
        metrics.counters["codegen_failures"] += 1
        log.warning("ember: running a graph without generated kernels: %s", compiled.codegen_error)
    log.debug("ember: compiled a graph of %d nodes\n%s", graph.num_nodes, graph)

    if compiled.has_mutations:
        # The graph was traced assuming its inputs do not alias. A call whose mutated input shares
        # memory with another input runs eagerly (checked per call, in C++).
        def run(*args: torch.Tensor) -> Any:
            if compiled.mutated_inputs_alias(list(args)):
                metrics.counters["aliased_input_calls"] += 1
                return gm(*args[:n_gm])
            return rebuild(compiled(*args))
    elif rebuild is _identity_tuple:
        return compiled  # Dynamo calls the C++ CompiledGraph directly: no Python per call
    else:
        def run(*args: torch.Tensor) -> Any:
            return rebuild(compiled(*args))
    return run


def _eager_backward(fn: Callable, sig: dict) -> Callable:
    """Double backward's fallback (runtime/compiled_function.h): the compiled backward records no
    history, so with create_graph=True the program runs again eagerly on the call's inputs and
    autograd differentiates that; the gradients it returns can be differentiated again."""
    tangent_outputs, grad_inputs = sig["tangent_outputs"], sig["grad_inputs"]

    def run(primals: tuple, grads: tuple) -> tuple:
        metrics.counters["double_backward_fallbacks"] += 1
        log.info("ember: double backward (create_graph=True) runs the graph again eagerly")
        with torch.enable_grad():
            tensors, _ = _flatten_outputs(fn(*primals))
            return torch.autograd.grad([tensors[i] for i in tangent_outputs],
                                       [primals[i] for i in grad_inputs], list(grads),
                                       create_graph=True, allow_unused=True)
    return run


def _training(gm: torch.fx.GraphModule, fn: Callable, example_inputs: Sequence[torch.Tensor],
              kinds: list[str], names: list[str], options: dict) -> Callable:
    """An input requires grad under grad mode: the joint forward and backward graph, split and
    compiled (runtime/compiled_function.h); the outputs' grad_fn runs the compiled backward."""
    requires_grad = [x.requires_grad for x in example_inputs]

    def build():
        graph, rebuild, sig = trace_joint(fn, example_inputs, requires_grad, kinds, names,
                                          options=options)
        compiled = _C.CompiledFunction(
            graph, sig["num_primals"], sig["num_forward_outputs"], sig["tangent_outputs"],
            sig["grad_inputs"], options=options, rebased_inputs=sig["rebased_inputs"])
        compiled.set_eager_backward(_eager_backward(fn, sig))
        return graph, rebuild, compiled

    built = _build_or_fallback(gm, build)
    if callable(built):
        return built
    graph, rebuild, compiled = built
    metrics.counters["graphs"] += 1
    metrics.counters["training_graphs"] += 1
    metrics.counters["nodes"] += graph.num_nodes
    metrics.counters["kernels"] += compiled.num_kernels
    log.debug("ember: compiled a joint graph of %d nodes (%d saved for backward)\n%s",
              graph.num_nodes, compiled.num_saved, graph)
    if rebuild is _identity_tuple:
        return compiled

    def run(*args: torch.Tensor) -> Any:
        return rebuild(compiled(*args))
    return run


# The name under which the torch_dynamo_backends entry point finds it (pyproject.toml).
ember_backend = backend
