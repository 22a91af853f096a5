#include "capture/bytecode/location_table.h"

#include "support/error.h"

namespace ember::capture::bytecode {
namespace {

// Entry kinds (the 4-bit code in an entry's first byte).
constexpr int kShortMax = 9;
constexpr int kOneLine0 = 10;
constexpr int kNoColumn = 13;
constexpr int kLong = 14;
constexpr int kNone = 15;

class Reader {
 public:
  explicit Reader(std::string_view s) : s_(s) {}
  bool done() const { return i_ >= s_.size(); }
  int byte() {
    EMBER_INTERNAL_ASSERT(i_ < s_.size()) << "truncated location table";
    return static_cast<unsigned char>(s_[i_++]);
  }
  int varint() {
    int b = byte();
    int value = b & 63;
    int shift = 0;
    while (b & 64) {
      b = byte();
      shift += 6;
      value |= (b & 63) << shift;
    }
    return value;
  }
  int svarint() {
    int v = varint();
    return (v & 1) ? -(v >> 1) : (v >> 1);
  }

 private:
  std::string_view s_;
  size_t i_ = 0;
};

void put_varint(std::string& out, unsigned value) {
  while (value >= 64) {
    out.push_back(static_cast<char>(64 | (value & 63)));
    value >>= 6;
  }
  out.push_back(static_cast<char>(value));
}

void put_svarint(std::string& out, int value) {
  put_varint(out, value < 0 ? (static_cast<unsigned>(-value) << 1) | 1
                            : static_cast<unsigned>(value) << 1);
}

void put_header(std::string& out, int code, int units) {
  out.push_back(static_cast<char>(0x80 | (code << 3) | (units - 1)));
}

/// One entry of 1..8 units; mirrors write_location_info_entry in CPython's assembler.
void put_entry(std::string& out, const Position& loc, int units, int& line) {
  if (loc.line < 0) {
    put_header(out, kNone, units);
    return;
  }
  int line_delta = loc.line - line;
  int column = loc.col;
  int end_column = loc.end_col;
  if (column < 0 || end_column < 0) {
    if (loc.end_line == loc.line || loc.end_line == -1) {
      put_header(out, kNoColumn, units);
      put_svarint(out, line_delta);
      line = loc.line;
      return;
    }
  } else if (loc.end_line == loc.line) {
    if (line_delta == 0 && column < 80 && end_column - column < 16 && end_column >= column) {
      put_header(out, column / 8, units);
      out.push_back(static_cast<char>(((column % 8) << 4) | (end_column - column)));
      return;
    }
    if (line_delta >= 0 && line_delta < 3 && column < 128 && end_column < 128) {
      put_header(out, kOneLine0 + line_delta, units);
      out.push_back(static_cast<char>(column));
      out.push_back(static_cast<char>(end_column));
      line = loc.line;
      return;
    }
  }
  put_header(out, kLong, units);
  put_svarint(out, line_delta);
  put_varint(out, static_cast<unsigned>(loc.end_line - loc.line));
  put_varint(out, static_cast<unsigned>(column + 1));
  put_varint(out, static_cast<unsigned>(end_column + 1));
  line = loc.line;
}

}  // namespace

std::vector<Position> decode_locations(std::string_view table, int firstlineno, size_t num_units) {
  std::vector<Position> out(num_units);
  Reader r(table);
  int line = firstlineno;
  size_t unit = 0;
  while (!r.done()) {
    int first = r.byte();
    EMBER_INTERNAL_ASSERT(first & 0x80) << "location table entry without its start bit";
    int code = (first >> 3) & 15;
    int units = (first & 7) + 1;
    Position p;
    if (code == kNone) {
      // no location
    } else if (code == kLong) {
      line += r.svarint();
      p.line = line;
      p.end_line = line + r.varint();
      p.col = r.varint() - 1;
      p.end_col = r.varint() - 1;
    } else if (code == kNoColumn) {
      line += r.svarint();
      p.line = p.end_line = line;
    } else if (code >= kOneLine0) {
      line += code - kOneLine0;
      p.line = p.end_line = line;
      p.col = r.byte();
      p.end_col = r.byte();
    } else {
      EMBER_INTERNAL_ASSERT(code <= kShortMax);
      int second = r.byte();
      p.line = p.end_line = line;
      p.col = code * 8 + ((second >> 4) & 7);
      p.end_col = p.col + (second & 15);
    }
    for (int k = 0; k < units && unit < num_units; ++k) out[unit++] = p;
  }
  return out;
}

std::string encode_locations(const std::vector<LocationRun>& runs, int firstlineno) {
  std::string out;
  int line = firstlineno;
  for (const LocationRun& run : runs) {
    int units = run.units;
    while (units > 8) {
      put_entry(out, run.pos, 8, line);
      units -= 8;
    }
    if (units > 0) put_entry(out, run.pos, units, line);
  }
  return out;
}

}  // namespace ember::capture::bytecode
