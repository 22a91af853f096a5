#include "capture/bytecode/exception_table.h"

#include "support/error.h"

namespace ember::capture::bytecode {
namespace {

constexpr int kStartBit = 0x80;
constexpr int kContinue = 0x40;

int read_varint(std::string_view s, size_t& i, bool first) {
  EMBER_INTERNAL_ASSERT(i < s.size()) << "truncated exception table";
  int b = static_cast<unsigned char>(s[i++]);
  EMBER_INTERNAL_ASSERT(!first || (b & kStartBit)) << "exception table entry without its start bit";
  int value = b & 63;
  while (b & kContinue) {
    EMBER_INTERNAL_ASSERT(i < s.size()) << "truncated exception table";
    b = static_cast<unsigned char>(s[i++]);
    value = (value << 6) | (b & 63);
  }
  return value;
}

/// Mirrors assemble_emit_exception_table_item in CPython's assembler.
void put_varint(std::string& out, int value, int msb) {
  EMBER_INTERNAL_ASSERT(value >= 0 && value < (1 << 30));
  for (int shift = 24; shift > 0; shift -= 6) {
    if (value >= (1 << shift)) {
      out.push_back(static_cast<char>(((value >> shift) & 63) | kContinue | msb));
      msb = 0;
    }
  }
  out.push_back(static_cast<char>((value & 63) | msb));
}

}  // namespace

std::vector<ExceptionEntry> decode_exception_table(std::string_view table) {
  std::vector<ExceptionEntry> out;
  size_t i = 0;
  while (i < table.size()) {
    ExceptionEntry e;
    e.start = read_varint(table, i, /*first=*/true);
    e.end = e.start + read_varint(table, i, false);
    e.target = read_varint(table, i, false);
    int dl = read_varint(table, i, false);
    e.depth = dl >> 1;
    e.lasti = dl & 1;
    out.push_back(e);
  }
  return out;
}

std::string encode_exception_table(const std::vector<ExceptionEntry>& entries) {
  std::string out;
  for (const ExceptionEntry& e : entries) {
    EMBER_INTERNAL_ASSERT(e.end > e.start);
    put_varint(out, e.start, kStartBit);
    put_varint(out, e.end - e.start, 0);
    put_varint(out, e.target, 0);
    put_varint(out, (e.depth << 1) | (e.lasti ? 1 : 0), 0);
  }
  return out;
}

}  // namespace ember::capture::bytecode
