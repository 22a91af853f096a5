/// \file
/// EMBER_LOGS for capture: which topics are on, and a warning through Python's logging module
/// (logger "ember"). Used by the hook (recompiles) and by the capture compiler.
#pragma once

#include <string>

namespace ember::capture {

/// Whether EMBER_LOGS (a comma list) names `topic`, or "all".
bool log_enabled(const char* topic);

/// logging.getLogger("ember").warning(msg); keeps a pending Python error as it was. GIL held.
void log_warning(const std::string& msg);

}  // namespace ember::capture
