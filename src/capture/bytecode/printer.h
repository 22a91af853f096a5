/// \file
/// print: the text form of the normalised bytecode IR, for dumps and golden tests.
#pragma once

#include <Python.h>

#include <string>

#include "capture/bytecode/instruction.h"

namespace ember::capture::bytecode {

/// One line per instruction, then one per handler:
///
///     <index> <OP> [<arg> [(<argval>)]] [flags=<n>] [kw=<names>] [-> <target>] [exc=<h>]  line <l>
///     handler <h>: -> <target> depth <d> [lasti]
///
/// With `co` (the code object the IR was decoded from, or one with the same co_consts, co_names
/// and locals) args are also shown resolved: names, locals, constant reprs (code objects as
/// `<code NAME>`), comparison and binary operators. Deterministic: no addresses, no offsets.
/// Requires the GIL when `co` is given. An out-of-range arg is shown as `(?)`, never an error.
std::string print(const Code& code, PyCodeObject* co = nullptr);

}  // namespace ember::capture::bytecode
