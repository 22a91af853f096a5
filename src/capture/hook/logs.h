/// \file
/// Capture's logs: which topics are on (CompileOptions::Capture::logs, EMBER_LOGS, set by
/// python/ember/capture.py before each compile), and a warning through Python's logging module
/// (logger "ember"). Used by the hook (recompiles) and by the capture compiler.
#pragma once

#include <string>
#include <vector>

namespace ember::capture {

/// Sets the topics: a comma list ("recompiles,graph_breaks", "all", or "" for none). GIL held.
void set_log_topics(const std::string& topics);

/// Whether the topics name `topic`, or "all". GIL held.
bool log_enabled(const char* topic);

/// logging.getLogger("ember").warning(msg); keeps a pending Python error as it was. GIL held.
void log_warning(const std::string& msg);

/// While one holds, log_warning keeps its messages here instead of logging them (the innermost
/// one, when they nest): a compile that may be thrown away logs only once it is kept. It holds
/// from construction to `take()`, `release()` or destruction, which end the innermost one. GIL
/// held.
class HeldLogs {
 public:
  HeldLogs();
  ~HeldLogs();
  HeldLogs(const HeldLogs&) = delete;
  HeldLogs& operator=(const HeldLogs&) = delete;

  /// Stops holding; returns what was held.
  std::vector<std::string> take();
  /// Stops holding; logs what was held (to the next holder out, if any).
  void release();

 private:
  friend void log_warning(const std::string& msg);
  std::vector<std::string> messages_;
  HeldLogs* outer_;
  bool holding_ = true;
};

}  // namespace ember::capture
