/// \file
/// The trace-time rewrites, as one table (rewrites.cpp): the choices eager makes on a device,
/// made while an op is recorded, and the forms of ops the scheduler fuses better. Each row is
/// {name, ops it matches, the devices it applies on and the option that widens them to every
/// device, what else it requires, what it does, its function} (tracer/rewrite_call.h); every
/// function has one signature. Whoever creates a TraceSession gives it this table
/// (TraceSession(options, rewrite::rewrite_table())); the session tries the rows in order.
///
/// A row can be turned off by name (CompileOptions::Trace::disabled_rewrites, a comma list), for
/// the before/after tests of each rewrite (tests/python/rewrite) and for measuring what one
/// gains.
#pragma once

#include "tracer/rewrite_call.h"

namespace ember::rewrite {

/// Every rewrite, in the order TraceSession::record tries them.
tracer::RewriteTable rewrite_table();

/// Registers the rewrites that are dispatcher kernels above autograd rather than rows
/// (attention with a row mask, attention_rewrite.h; training batch norm off cuDNN,
/// batch_norm_rewrite.h). Idempotent; call once at import, after
/// tracer::register_tracer_kernels.
void register_rewrite_kernels();

}  // namespace ember::rewrite
