/// \file
/// Reads the text form of printer.h back into a Graph, so that graph passes can be tested from
/// text and printed graphs (dumps, repro scripts) can be loaded again.
///
/// Grammar (tokens are separated by optional whitespace; `#` starts a comment to the end of the
/// line, except on an input line, where it starts the input's annotation):
///
///   graph    := 'graph' '{' {input} {node} {mutation} 'return' '(' [VALUE {',' VALUE}] ')' '}'
///   input    := 'input' VALUE ':' type '#' KIND [NAME]           KIND: user param buffer
///             | 'const' VALUE ':' type ['#' NAME]
///   node     := [outputs '='] OP '(' [arg {',' arg}] ')'
///   outputs  := typed | '(' [typed {',' typed}] ')'
///             | '[' [typed {',' typed}] ']'                    the op returns Tensor[]
///   typed    := VALUE ':' type
///   type     := DTYPE '[' [INT {',' INT}] ']' ['{' [INT {',' INT}] '}'] ['+' INT] DEVICE ['grad']
///   mutation := 'mutate' VALUE '<-' VALUE
///   arg      := [IDENT '='] value                              IDENT '=': a kwarg-only argument
///   value    := 'None' | 'True' | 'False' | INT | FLOAT | STRING | VALUE
///             | DTYPE | DEVICE | LAYOUT | MEMORY_FORMAT | '[' [item {',' item}] ']'
///   item     := 'None' | 'True' | 'False' | INT | FLOAT | VALUE    one kind per list; None
///                                                                  goes with VALUEs
///   OP       := IDENT {'::' IDENT} ['.' IDENT]        aten::add.Tensor: aten::add, overload Tensor
///   VALUE    := '%' DIGITS
///   INT      := ['-'] DIGITS
///   FLOAT    := ['-'] (a Python float repr | 'inf' | 'nan')
///   STRING   := '"' bytes, with \\ \" \n \t \r \xNN escapes, '"'
///   NAME     := a run of bytes above ' ' (up to the end of the line), or a STRING
///   DTYPE, DEVICE [':' INDEX], LAYOUT, MEMORY_FORMAT := the names types.h prints, including the
///              `dtype<N>`, `device<K>`, `layout<N>` and `memory_format<N>` of unnamed codes
///
/// A type without `{strides}` has contiguous strides, one without `+offset` storage offset 0.
/// Value ids need not appear in increasing order (a pass may add a constant after some nodes), but
/// every id from %0 up to the largest must be defined exactly once, before it is read.
///
/// What the text does not carry, and what the parser builds instead:
///  - OpInfo: the names of positional arguments (the printer writes only kwarg-only names). The
///    parsed op has an empty name for each positional argument, the printed name and
///    kwarg_only = true for each `name=value`, and returns_list = true for `[...]` outputs. So the
///    verifier's argument count holds and printing is unchanged, but code that looks an argument
///    up by name (the scheduler) finds only kwarg-only ones. Ops are interned in order of first
///    use; ops the nodes do not use are gone.
///  - Node::result_slots is not printed; parsed nodes have none (outputs are results 0, 1, ...).
///  - ValueList::optional_items (Tensor?[] vs Tensor[]) shows only through a None item: a list
///    with a None is Tensor?[], one without is Tensor[].
///  - An empty list `[]` has no element kind; it parses as an empty int list.
///  - A NaN's sign and payload: `nan` parses as a positive quiet NaN.
///
/// Guarantees: for every graph `g` that verify_graph accepts (with op names and kwarg-only
/// argument names that are identifiers, as every ATen schema's are),
/// `print_graph(parse_graph(print_graph(g))) == print_graph(g)`; every input, value (id, type,
/// defining node or input and position), argument other than the cases above, mutation and output
/// comes back equal. The result always passes verify_graph.
///
/// Errors are UserErrors "line L:C: <what>", naming what was expected and what was found, also for
/// text that parses but describes an invalid graph (a value read before it is defined, defined
/// twice, a mutation of a constant, strides of the wrong rank, ...).
#pragma once

#include <string_view>

#include "graph/graph.h"

namespace ember::graph {

/// Parses one graph; the whole text must be consumed. Throws UserError as described above.
Graph parse_graph(std::string_view text);

}  // namespace ember::graph
