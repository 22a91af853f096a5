/// \file
/// A reference interpreter for loop IR: slow, simple and exact to the semantics of expr.h and
/// stmt.h. Tests use it to check that passes preserve meaning (simplify's property test) and,
/// later, that generated code agrees with the IR. Reductions run in program order.
///
/// Float math is computed in double and rounded to the element type, so it is at least as
/// accurate as compiled code; f16 is not supported. Out-of-bounds accesses, division by zero
/// and unbound names are user errors, reported with the buffer and index.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "loop/stmt.h"

namespace ember::loop {

/// One element: integers and b8 in `i`, floats in `f`.
struct Scalar {
  DType dtype = DType::Int64;
  int64_t i = 0;
  double f = 0;

  static Scalar of_int(DType t, int64_t v);
  static Scalar of_float(DType t, double v);
  /// The value as a double (for tests comparing results).
  double as_double() const { return is_float(dtype) ? f : static_cast<double>(i); }
};

using BufferMap = std::map<std::string, std::vector<Scalar>>;

/// What expressions read: size bindings, variable values and buffers.
struct EvalEnv {
  Bindings sizes;
  std::map<std::string, Scalar> vars;
  BufferMap* buffers = nullptr;
};

Scalar eval_expr(const Expr& e, const EvalEnv& env);

/// Runs `body` with `env`, writing into env.buffers.
void run_stmt(const Stmt& body, EvalEnv& env);

/// Runs kernel `k` with sizes `sizes` on `buffers`. Input and InOut buffers must be present;
/// Output and Temp buffers that are missing are created (zero-filled) with the extent their sizes
/// and strides need.
void run_kernel(const Kernel& k, const Bindings& sizes, BufferMap& buffers);

}  // namespace ember::loop
