/// \file
/// Capture's logs: which topics are on (CompileOptions::Capture::logs, EMBER_LOGS, set by
/// python/ember/capture.py before each compile), and a warning through Python's logging module
/// (logger "ember"). Used by the hook (recompiles) and by the capture compiler.
#pragma once

#include <string>

namespace ember::capture {

/// Sets the topics: a comma list ("recompiles,graph_breaks", "all", or "" for none). GIL held.
void set_log_topics(const std::string& topics);

/// Whether the topics name `topic`, or "all". GIL held.
bool log_enabled(const char* topic);

/// logging.getLogger("ember").warning(msg); keeps a pending Python error as it was. GIL held.
void log_warning(const std::string& msg);

}  // namespace ember::capture
