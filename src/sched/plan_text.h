/// \file
/// A Plan as text and back, for the on-disk plan cache (runtime/plan_cache.h): the steps, the
/// groups' node, input, output and reuse lists, and each kernel in the loop IR's printed form
/// (loop/printer.h), read back by its parser (loop/parser.h). phase_seconds is not kept.
///
///   ember-plan v1
///   fused <num_fused_nodes>
///   steps <n>                      then n lines: E|K|V <index> <root>
///   groups <n>                     then per group:
///   nodes <k> <id>...
///   inputs <k> <id>...
///   outputs <k> <id>...
///   index_status 0|1
///   reuse <k> <input> <output>...
///   kernel <bytes>                 then the kernel's text, that many bytes, and a newline
#pragma once

#include <string>
#include <string_view>

#include "sched/fusion.h"

namespace ember::sched {

std::string print_plan(const Plan& plan);

/// Requires text print_plan wrote. Throws UserError naming what is malformed otherwise.
Plan parse_plan(std::string_view text);

/// Whether two plans are the same (steps, groups, kernels structurally equal; phase_seconds
/// aside): parse_plan(print_plan(p)) is checked against p before a plan is cached.
bool same_plan(const Plan& a, const Plan& b);

}  // namespace ember::sched
