/// \file
/// The deterministic text form of loop IR; parser.h reads it back. Byte-identical across runs,
/// and print(parse(print(k))) == print(k).
///
///   kernel softmax(s0, s1) {
///     input x : f32[s0, s1] strides [s1, 1]
///     output y : f32[s0, s1] strides [s1, 1]
///     for (i, 0, s0) parallel {
///       alloc m : f32[1] {
///         m[0] = f32(-inf)
///         for (r, 0, s1) {
///           accumulate max m[0] <- x[((i * s1) + r)]
///         }
///         ...
///       }
///     }
///   }
///
/// Expressions:
///  - i64 constants are plain decimals (`-3`); b8 constants are `true` / `false`; other integer
///    constants and all float constants name their type: `i32(7)`, `f32(0.5)`, `f64(-inf)`,
///    `f32(nan)`. Floats print the shortest digits that read back to the same value of their
///    type (f32: of the float).
///  - Var and SizeVar print their name; which one a name is comes from the kernel header (size
///    variables) and the enclosing For/Let (variables).
///  - Binary nodes are fully parenthesized infix, `(a + b)`, with + - * / // % < <= == != && ||;
///    Min and Max print as `min(a, b)` / `max(a, b)`.
///  - `!a`, `select(c, t, f)`, `cast<f32>(a)`, `buf[index]` (Load), `exp(a)`, `pow(a, b)` (Call).
///
/// Statements, one per line, bodies in braces, indented by two spaces:
///  - `for (i, min, extent) [parallel|vectorized|unrolled] {` (serial prints no kind)
///  - `buf[index] = value`
///  - `accumulate <op> buf[index] <- value`; with several buffers or values, both are
///    parenthesized lists: `accumulate argmax (v, i)[0] <- (x, r)`
///  - `let t = value {`
///  - `if cond {`, then `} else {` when there is an else case
///  - `alloc buf : f32[n, 4] {`
///  - a Block prints its statements in order (the body of a brace is a Block or one statement).
///
/// Kernel: `kernel name(size vars) {` (`kernel name(size vars) combo {` for a combo kernel), one
/// line per buffer parameter (`<role> name : <dtype>[sizes] strides [strides]`), the body's
/// statements, `}` and a newline.
/// Undefined handles print as `<undefined>`, so broken IR still prints for error messages.
#pragma once

#include <ostream>
#include <string>

#include "loop/stmt.h"

namespace ember::loop {

std::string print_expr(const Expr& e);
/// The statement's lines, each indented by `indent` spaces and ending in a newline.
std::string print_stmt(const Stmt& s, int indent = 0);
std::string print_kernel(const Kernel& k);

/// A float constant's literal text without the dtype wrapper ("0.5", "-inf", "nan").
std::string print_float(DType t, double v);

std::ostream& operator<<(std::ostream& os, const Expr& e);
std::ostream& operator<<(std::ostream& os, const Stmt& s);

}  // namespace ember::loop
