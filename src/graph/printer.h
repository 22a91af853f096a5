/// \file
/// The deterministic, readable text form of a Graph. Byte-identical across runs.
///
///   graph {
///     input %0 : f32[2, 3] cpu  # user x
///     const %1 : f32[3] cpu
///     %2 : f32[2, 3] cpu = aten::add.Tensor(%0, %1, alpha=1)
///     mutate %0 <- %2
///     return (%2)
///   }
///
/// Rules:
///  - Inputs, in order: `input %N : <type>  # <kind>[ <name>]` for user, param and buffer inputs;
///    `const %N : <type>`, with `  # <name>` only when the constant is named. A name containing
///    whitespace, a control byte, `"` or `\` is printed as a quoted string literal.
///  - Nodes, in order: `<outputs> = <op>(<args>)`. One output prints as `%N : <type>`, several as
///    `(%N : <type>, ...)`; an op whose return is `Tensor[]` always uses `[...]`, even for zero or
///    one element. A node with no outputs (and no list return) prints just the call. Arguments
///    whose schema marks them kwarg-only print as `name=value`, the rest positionally.
///  - Then `mutate %input <- %value` per mutation, `return (...)`, `}` and a newline.
///  - Arguments (print_arg): None, True/False, decimal ints, floats as Python's repr (shortest
///    round-trip digits: 1.0, 0.5, 1e-05, 1e+16, inf, -inf, nan), strings double-quoted with
///    \\ \" \n \t \r and \xNN escapes, lists as `[a, b]`, enums by their *_name, `%N`, and
///    Tensor?[] items that are missing as None.
///  - A broken graph still prints: an unknown op prints as `<op K>`, an unknown value's type as
///    `<undefined>`, so check_graph can show it.
#pragma once

#include <string>

#include "graph/graph.h"

namespace ember::graph {

std::string print_graph(const Graph& g);
/// The text of one argument as the printer writes it ("%3", "[1, 2]", "None", "f32", ...).
std::string print_arg(const Arg& a);

}  // namespace ember::graph
