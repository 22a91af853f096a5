/// \file
/// The 3.11+ location table (co_linetable; python/cpython:Objects/locations.md): decoding to one
/// Position per code unit, and encoding exactly as CPython's assembler does, so that an unchanged
/// code object round-trips to identical bytes.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "capture/bytecode/instruction.h"

namespace ember::capture::bytecode {

/// The position of each of `num_units` code units. Units the table does not cover get the unknown
/// Position. Throws InternalError on a malformed table.
std::vector<Position> decode_locations(std::string_view table, int firstlineno, size_t num_units);

/// `units` consecutive code units (>= 1) that share one position.
struct LocationRun {
  Position pos;
  int units = 0;
};

/// Encodes `runs` in order, one run after another, splitting runs longer than 8 units and picking
/// the shortest form per entry with CPython's rules (none, short, one-line, line-only, long).
/// The caller decides what a run is: CPython 3.11 writes one run per instruction, 3.12+ merges
/// consecutive instructions with equal positions.
std::string encode_locations(const std::vector<LocationRun>& runs, int firstlineno);

}  // namespace ember::capture::bytecode
