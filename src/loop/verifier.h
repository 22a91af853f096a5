/// \file
/// Checks the invariants of stmt.h and expr.h that make() cannot see because they need context.
/// Run between passes in tests and after lowering. (Local typing — operand dtypes of binary
/// nodes, i64 indices, b8 conditions — is enforced by each node's make() and cannot be broken.)
#pragma once

#include <string>
#include <vector>

#include "loop/stmt.h"

namespace ember::loop {

/// Returns one message per problem, in program order; empty when valid. Checks:
///  - size variables and buffer parameters are declared once; a buffer's sizes and strides have
///    equal rank and use only declared size variables and constants;
///  - every Var is used inside the For or Let that binds it, with the dtype it was bound with,
///    and no name is bound again inside its own scope or collides with a size variable;
///  - every SizeVar is declared by the kernel;
///  - Loads, Stores, Accumulates name a declared buffer (a parameter or an enclosing Allocate);
///    an Allocate does not reuse a name in scope;
///  - a Load's dtype is its buffer's dtype; a Store's value has its buffer's dtype;
///    Accumulate buffers have the dtypes their op needs (argmax/argmin index slot: i64);
///  - nothing is stored or accumulated into an input buffer;
///  - a combo kernel's parts are independent: no part reads or writes a buffer parameter that
///    another part writes.
std::vector<std::string> verify_kernel(const Kernel& k);

/// Throws InternalError listing every problem when verify_kernel finds any.
void check_kernel(const Kernel& k);

}  // namespace ember::loop
