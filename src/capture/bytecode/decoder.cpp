#include "capture/bytecode/decoder.h"

#include <array>
#include <map>
#include <string>
#include <tuple>

#include "capture/bytecode/exception_table.h"
#include "capture/bytecode/location_table.h"
#include "capture/bytecode/opcode_table.h"
#include "capture/bytecode/py_ref.h"
#include "support/error.h"

namespace ember::capture::bytecode {
namespace {

/// One instruction as encoded: its first code unit (EXTENDED_ARG included), its size in code
/// units (EXTENDED_ARGs, the opcode, its caches), the opcode and the full oparg.
struct RawInstr {
  int start = 0;
  int size = 0;
  int opcode = 0;
  int arg = 0;
};

std::string_view bytes_view(PyObject* b) {
  EMBER_INTERNAL_ASSERT(b != nullptr && PyBytes_Check(b));
  return {PyBytes_AS_STRING(b), static_cast<size_t>(PyBytes_GET_SIZE(b))};
}

std::vector<RawInstr> split_instructions(std::string_view bytes, const OpcodeTable& t) {
  EMBER_INTERNAL_ASSERT(bytes.size() % 2 == 0);
  const int n = static_cast<int>(bytes.size() / 2);
  auto opcode_at = [&](int i) { return static_cast<unsigned char>(bytes[2 * i]); };
  auto oparg_at = [&](int i) { return static_cast<unsigned char>(bytes[2 * i + 1]); };
  std::vector<RawInstr> out;
  for (int i = 0; i < n;) {
    RawInstr r;
    r.start = i;
    int arg = 0;
    while (opcode_at(i) == t.extended_arg) {
      arg = (arg | oparg_at(i)) << 8;
      ++i;
      EMBER_INTERNAL_ASSERT(i < n) << "EXTENDED_ARG at the end of the code";
    }
    r.opcode = opcode_at(i);
    r.arg = arg | oparg_at(i);
    EMBER_INTERNAL_ASSERT(t.valid[r.opcode]) << "unknown opcode " << r.opcode << " at " << i;
    i += 1 + t.caches[r.opcode];
    r.size = i - r.start;
    out.push_back(r);
  }
  return out;
}

/// Native opcode -> normalised Op: the direction-specific jumps lose their direction.
const std::array<Op, 256>& normalised_ops(const OpcodeTable& t) {
  static const std::array<Op, 256> table = [&] {
    std::array<Op, 256> m = t.op;
    for (int i = 0; i < 256; ++i) {
      if (!t.valid[i]) continue;
      std::string name(op_name(t.op[i]));
      for (const char* prefix : {"POP_JUMP_FORWARD_IF_", "POP_JUMP_BACKWARD_IF_"}) {
        std::string p(prefix);
        if (name.compare(0, p.size(), p) == 0)
          m[i] = op_from_name("POP_JUMP_IF_" + name.substr(p.size()));
      }
      if (name == "JUMP_FORWARD" || name == "JUMP_BACKWARD") m[i] = Op::JUMP;
      if (name == "JUMP_BACKWARD_NO_INTERRUPT") m[i] = Op::JUMP_NO_INTERRUPT;
    }
    return m;
  }();
  return table;
}

}  // namespace

Code decode(PyCodeObject* co) {
  const OpcodeTable& t = opcode_table();
  PyRef code_bytes(PyCode_GetCode(co));
  EMBER_INTERNAL_ASSERT(code_bytes) << fetch_python_error();
  std::string_view bytes = bytes_view(code_bytes.get());
  const int n = static_cast<int>(bytes.size() / 2);
  std::vector<RawInstr> raws = split_instructions(bytes, t);
  std::vector<Position> positions =
      decode_locations(bytes_view(co->co_linetable), co->co_firstlineno, static_cast<size_t>(n));

  Code out;
  out.minor = t.minor;

  // Exception table -> a handler per code unit; handlers deduplicated by (target, depth, lasti).
  std::vector<int> handler_of_unit(static_cast<size_t>(n), -1);
  std::vector<int> handler_target_unit;
  std::map<std::tuple<int, int, bool>, int> handler_ids;
  for (const ExceptionEntry& e : decode_exception_table(bytes_view(co->co_exceptiontable))) {
    EMBER_INTERNAL_ASSERT(e.start >= 0 && e.end <= n && e.target < n) << "bad exception entry";
    auto key = std::make_tuple(e.target, e.depth, e.lasti);
    auto [it, inserted] = handler_ids.emplace(key, static_cast<int>(out.handlers.size()));
    if (inserted) {
      out.handlers.push_back(Handler{/*target=*/-1, e.depth, e.lasti});
      handler_target_unit.push_back(e.target);
    }
    for (int u = e.start; u < e.end; ++u) handler_of_unit[u] = it->second;
  }

  const std::array<Op, 256>& norm = normalised_ops(t);
  std::vector<int> index_of_unit(static_cast<size_t>(n) + 1, -1);
  std::vector<std::pair<int, int>> jumps;  // (instr index, target unit)
  std::vector<int> folded_starts;          // KW_NAMES / PRECALL waiting for their CALL
  int pending_kwnames = -1;
  Position pending_kwnames_pos;
  out.instrs.reserve(raws.size());

  for (const RawInstr& r : raws) {
    Op native = t.op[r.opcode];
    Instr in;
    in.op = norm[r.opcode];
    in.arg = r.arg;
    in.offset = r.start;
    in.pos = positions[r.start];
    in.handler = handler_of_unit[r.start];

    if (native == Op::KW_NAMES) {
      pending_kwnames = r.arg;
      pending_kwnames_pos = in.pos;
      folded_starts.push_back(r.start);
      continue;
    }
    if (native == Op::PRECALL) {
      folded_starts.push_back(r.start);
      continue;
    }
    const int idx = static_cast<int>(out.instrs.size());
    for (int s : folded_starts) index_of_unit[s] = idx;
    index_of_unit[r.start] = idx;
    if (native == Op::CALL) {
      in.kwnames = pending_kwnames;
      in.kwnames_pos = pending_kwnames_pos;
      pending_kwnames = -1;
      pending_kwnames_pos = Position{};
      folded_starts.clear();
    }
    EMBER_INTERNAL_ASSERT(folded_starts.empty())
        << "KW_NAMES/PRECALL not followed by CALL at offset " << r.start;

    if (t.jrel[r.opcode]) {
      int next = r.start + r.size;
      jumps.emplace_back(idx, t.backward[r.opcode] ? next - r.arg : next + r.arg);
      in.arg = 0;
    }
    switch (native) {
      case Op::LOAD_GLOBAL:
        in.flags = r.arg & 1;
        in.arg = r.arg >> 1;
        break;
      case Op::LOAD_ATTR:
        if (t.minor >= 12) {
          in.arg = r.arg >> 1;
          if (r.arg & 1) in.op = Op::LOAD_METHOD;
        }
        break;
      case Op::COMPARE_OP:
        if (t.minor >= 12) {
          int bits = t.minor == 12 ? 4 : 5;
          in.flags = static_cast<uint8_t>(r.arg & ((1 << bits) - 1));
          in.arg = r.arg >> bits;
        }
        break;
      case Op::LOAD_SUPER_ATTR:
        in.flags = r.arg & 3;
        in.arg = r.arg >> 2;
        break;
      case Op::LOAD_FAST_LOAD_FAST:
      case Op::STORE_FAST_LOAD_FAST:
      case Op::STORE_FAST_STORE_FAST: {
        Instr second = in;
        in.op = native == Op::LOAD_FAST_LOAD_FAST ? Op::LOAD_FAST : Op::STORE_FAST;
        second.op = native == Op::STORE_FAST_STORE_FAST ? Op::STORE_FAST : Op::LOAD_FAST;
        in.arg = r.arg >> 4;
        second.arg = r.arg & 15;
        out.instrs.push_back(in);
        out.instrs.push_back(second);
        continue;
      }
      default:
        break;
    }
    out.instrs.push_back(in);
  }
  EMBER_INTERNAL_ASSERT(folded_starts.empty()) << "KW_NAMES/PRECALL at the end of the code";

  auto resolve = [&](int unit) {
    EMBER_INTERNAL_ASSERT(unit >= 0 && unit < n && index_of_unit[unit] >= 0)
        << "jump or handler target " << unit << " is not the start of an instruction";
    return index_of_unit[unit];
  };
  for (auto [idx, unit] : jumps) out.instrs[idx].target = resolve(unit);
  for (size_t h = 0; h < out.handlers.size(); ++h) {
    out.handlers[h].target = resolve(handler_target_unit[h]);
  }
  return out;
}

}  // namespace ember::capture::bytecode
