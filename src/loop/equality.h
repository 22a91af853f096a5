/// \file
/// Structural equality and a stable structural hash of loop IR. Two trees are equal when they
/// have the same node kinds, dtypes and fields, recursively; Vars compare by name and dtype.
/// Float constants compare by bit pattern (so NaN equals itself and -0.0 differs from 0.0). The
/// hash agrees with equality and is stable across runs and processes, so it can key caches.
#pragma once

#include <cstdint>

#include "loop/stmt.h"

namespace ember::loop {

bool structurally_equal(const Expr& a, const Expr& b);
bool structurally_equal(const Stmt& a, const Stmt& b);
/// Name, size variables, buffer parameters (all fields) and body.
bool structurally_equal(const Kernel& a, const Kernel& b);

uint64_t structural_hash(const Expr& e);
uint64_t structural_hash(const Stmt& s);
uint64_t structural_hash(const Kernel& k);

}  // namespace ember::loop
