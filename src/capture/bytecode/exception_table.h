/// \file
/// The 3.11+ exception table (co_exceptiontable; python/cpython:
/// Objects/exception_handling_notes.txt): entries of 6-bit big-endian varints, 0x80 marking the
/// first byte of an entry, 0x40 the continuation.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ember::capture::bytecode {

/// One entry; offsets in code units. Covers [start, end).
struct ExceptionEntry {
  int start = 0;
  int end = 0;
  int target = 0;
  int depth = 0;
  bool lasti = false;
};

/// The entries in table order. Throws InternalError on a malformed table.
std::vector<ExceptionEntry> decode_exception_table(std::string_view table);

/// Encodes entries (sorted, non-overlapping, non-empty) exactly as CPython's assembler does.
std::string encode_exception_table(const std::vector<ExceptionEntry>& entries);

}  // namespace ember::capture::bytecode
