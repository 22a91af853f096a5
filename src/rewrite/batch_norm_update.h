#pragma once

// Training batch norm's running statistics, recorded as mutations of the graph's inputs.
//
// Eager's CPU kernel of `native_batch_norm(training=True)` updates running_mean and running_var
// in place although its schema does not say so, so functionalization passes the op through
// unwrapped and no mutation would be recorded. `_native_batch_norm_legit_functional` has the
// same arguments and returns the new running statistics as outputs 3 and 4: such a call whose
// running statistics are the current values of two graph inputs is recorded as it, and the
// inputs take the new statistics as their values (TraceSession::update_input, as
// functionalization does for an op that mutates its arguments), so that `finish` records them
// as mutations. Running statistics that are not inputs (constants, values made by the program),
// or that are also read as the input, weight or bias, keep the op. See docs/design/tracer.md.

#include "tracer/rewrite_call.h"

namespace ember::rewrite {

/// The rewrite row's function (the table's `batch_norm_update`, any device): records the call
/// as above and returns true, or returns false, having done nothing, for any other call.
bool record_batch_norm_update(tracer::RewriteCall& call);

}  // namespace ember::rewrite
