#include "capture/bytecode/assembler.h"

#include <climits>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "capture/bytecode/exception_table.h"
#include "capture/bytecode/location_table.h"
#include "capture/bytecode/opcode_table.h"
#include "capture/bytecode/py_ref.h"
#include "support/error.h"

namespace ember::capture::bytecode {
namespace {

/// One instruction of the running version, as it will be written.
struct Native {
  int opcode = 0;
  int arg = 0;      ///< the oparg; for jumps computed by the layout
  int target = -1;  ///< jumps: native index of the target (after resolution)
  bool forward = true;
  int instr = -1;  ///< the Instr it comes from
  Position pos;
  int size = 1;  ///< code units: EXTENDED_ARGs + 1 + caches
};

int opcode_of(const OpcodeTable& t, Op op) {
  int n = t.native[static_cast<size_t>(op)];
  EMBER_INTERNAL_ASSERT(n >= 0 && n < 256 && t.valid[n])
      << op_name(op) << " is not an opcode of CPython 3." << t.minor;
  return n;
}

int extended_args(int arg) {
  EMBER_INTERNAL_ASSERT(arg >= 0) << "negative oparg " << arg;
  return arg > 0xFFFFFF ? 3 : arg > 0xFFFF ? 2 : arg > 0xFF ? 1 : 0;
}

bool same_position(const Position& a, const Position& b) {
  return a.line == b.line && a.end_line == b.end_line && a.col == b.col && a.end_col == b.end_col;
}

/// The direction-specific native op for a normalised jump.
Op directed(const OpcodeTable& t, Op op, bool forward) {
  switch (op) {
    case Op::JUMP:
      return forward ? Op::JUMP_FORWARD : Op::JUMP_BACKWARD;
    case Op::JUMP_NO_INTERRUPT:
      return forward ? Op::JUMP_FORWARD : Op::JUMP_BACKWARD_NO_INTERRUPT;
    default:
      break;
  }
  if (t.minor == 11) {
    std::string_view name = op_name(op);
    constexpr std::string_view kPrefix = "POP_JUMP_IF_";
    if (name.substr(0, kPrefix.size()) == kPrefix) {
      std::string suffix(name.substr(kPrefix.size()));
      return op_from_name((forward ? "POP_JUMP_FORWARD_IF_" : "POP_JUMP_BACKWARD_IF_") + suffix);
    }
  }
  return op;
}

/// The 3.13 super-instruction for a pair of halves, or NOP when there is none.
Op super_instruction(Op first, Op second) {
  if (first == Op::LOAD_FAST && second == Op::LOAD_FAST) return Op::LOAD_FAST_LOAD_FAST;
  if (first == Op::STORE_FAST && second == Op::LOAD_FAST) return Op::STORE_FAST_LOAD_FAST;
  if (first == Op::STORE_FAST && second == Op::STORE_FAST) return Op::STORE_FAST_STORE_FAST;
  return Op::NOP;
}

/// Lowers the IR to native instructions (targets still Instr indices); fills first_native.
std::vector<Native> lower(const Code& code, const OpcodeTable& t, std::vector<int>& first_native) {
  const int n = static_cast<int>(code.instrs.size());
  std::vector<bool> is_target(static_cast<size_t>(n), false);
  for (const Instr& in : code.instrs) {
    if (in.target >= 0) {
      EMBER_INTERNAL_ASSERT(in.target < n) << "jump target " << in.target << " out of range";
      is_target[in.target] = true;
    }
  }
  for (const Handler& h : code.handlers) {
    EMBER_INTERNAL_ASSERT(h.target >= 0 && h.target < n) << "handler target out of range";
    is_target[h.target] = true;
  }

  std::vector<Native> out;
  out.reserve(code.instrs.size() + code.instrs.size() / 4);
  first_native.assign(static_cast<size_t>(n), -1);
  for (int i = 0; i < n; ++i) {
    const Instr& in = code.instrs[i];
    EMBER_INTERNAL_ASSERT(in.handler < static_cast<int>(code.handlers.size()));
    first_native[i] = static_cast<int>(out.size());
    auto emit = [&](Op op, int arg, const Position& pos) {
      Native nv;
      nv.opcode = opcode_of(t, op);
      nv.arg = arg;
      nv.instr = i;
      nv.pos = pos;
      out.push_back(nv);
      return &out.back();
    };

    if (op_is_jump(in.op)) {
      EMBER_INTERNAL_ASSERT(in.target >= 0) << op_name(in.op) << " at " << i << " has no target";
      bool forward = in.target > i;
      Native* nv = emit(directed(t, in.op, forward), 0, in.pos);
      EMBER_INTERNAL_ASSERT(t.jrel[nv->opcode] && t.backward[nv->opcode] == !forward)
          << op_name(in.op) << " at " << i << " cannot jump " << (forward ? "forward" : "backward")
          << " to " << in.target << " on CPython 3." << t.minor;
      nv->target = in.target;
      nv->forward = forward;
      continue;
    }
    switch (in.op) {
      case Op::CALL:
        if (in.kwnames >= 0) {
          EMBER_INTERNAL_ASSERT(t.minor <= 12) << "CALL with kwnames on 3.13+: use CALL_KW";
          emit(Op::KW_NAMES, in.kwnames, in.kwnames_pos.line >= 0 ? in.kwnames_pos : in.pos);
        }
        if (t.minor == 11) emit(Op::PRECALL, in.arg, in.pos);
        emit(Op::CALL, in.arg, in.pos);
        break;
      case Op::LOAD_GLOBAL:
        emit(in.op, in.arg << 1 | (in.flags & 1), in.pos);
        break;
      case Op::LOAD_ATTR:
        if (t.minor >= 12) {
          emit(in.op, in.arg << 1 | (in.flags & 1), in.pos);
        } else {
          emit((in.flags & 1) ? Op::LOAD_METHOD : Op::LOAD_ATTR, in.arg, in.pos);
        }
        break;
      case Op::LOAD_METHOD:
        if (t.minor >= 12) {
          emit(Op::LOAD_ATTR, in.arg << 1 | 1, in.pos);
        } else {
          emit(in.op, in.arg, in.pos);
        }
        break;
      case Op::COMPARE_OP:
        if (t.minor == 11) {
          emit(in.op, in.arg, in.pos);
        } else {
          int bits = t.minor == 12 ? 4 : 5;
          emit(in.op, in.arg << bits | (in.flags & ((1 << bits) - 1)), in.pos);
        }
        break;
      case Op::LOAD_SUPER_ATTR:
        emit(in.op, in.arg << 2 | (in.flags & 3), in.pos);
        break;
      case Op::LOAD_FAST:
      case Op::STORE_FAST: {
        if (t.minor >= 13 && i + 1 < n) {
          const Instr& next = code.instrs[i + 1];
          Op fused = super_instruction(in.op, next.op);
          if (fused != Op::NOP && in.offset >= 0 && next.offset == in.offset && in.arg < 16 &&
              next.arg < 16 && !is_target[i + 1] && next.handler == in.handler) {
            emit(fused, in.arg << 4 | next.arg, in.pos);
            first_native[++i] = static_cast<int>(out.size()) - 1;
            break;
          }
        }
        emit(in.op, in.arg, in.pos);
        break;
      }
      default:
        emit(in.op, in.arg, in.pos);
        break;
    }
  }
  for (Native& nv : out) {
    if (nv.target >= 0) nv.target = first_native[nv.target];
  }
  return out;
}

/// Assigns jump args and sizes until the layout is stable; returns the offsets (one past the end
/// included).
std::vector<int> layout(std::vector<Native>& natives, const OpcodeTable& t) {
  for (Native& nv : natives) nv.size = 1 + t.caches[nv.opcode] + extended_args(nv.arg);
  std::vector<int> offsets(natives.size() + 1, 0);
  for (bool changed = true; changed;) {
    for (size_t k = 0; k < natives.size(); ++k) offsets[k + 1] = offsets[k] + natives[k].size;
    changed = false;
    for (size_t k = 0; k < natives.size(); ++k) {
      Native& nv = natives[k];
      if (nv.target < 0) continue;
      int next = offsets[k + 1];
      nv.arg = nv.forward ? offsets[nv.target] - next : next - offsets[nv.target];
      int size = 1 + t.caches[nv.opcode] + extended_args(nv.arg);
      if (size != nv.size) {
        nv.size = size;
        changed = true;
      }
    }
  }
  return offsets;
}

std::string write_code(const std::vector<Native>& natives, const OpcodeTable& t) {
  std::string out;
  for (const Native& nv : natives) {
    for (int e = extended_args(nv.arg); e > 0; --e) {
      out.push_back(static_cast<char>(t.extended_arg));
      out.push_back(static_cast<char>((nv.arg >> (8 * e)) & 0xFF));
    }
    out.push_back(static_cast<char>(nv.opcode));
    out.push_back(static_cast<char>(nv.arg & 0xFF));
    out.append(2 * static_cast<size_t>(t.caches[nv.opcode]), '\0');
  }
  return out;
}

/// 3.11 writes one location entry run per instruction, 3.12+ merges equal neighbours.
std::string write_locations(const std::vector<Native>& natives, const OpcodeTable& t,
                            int firstlineno) {
  std::vector<LocationRun> runs;
  for (const Native& nv : natives) {
    if (t.minor >= 12 && !runs.empty() && same_position(runs.back().pos, nv.pos)) {
      runs.back().units += nv.size;
    } else {
      runs.push_back(LocationRun{nv.pos, nv.size});
    }
  }
  return encode_locations(runs, firstlineno);
}

std::string write_exception_table(const Code& code, const std::vector<Native>& natives,
                                  const std::vector<int>& offsets,
                                  const std::vector<int>& first_native) {
  std::vector<ExceptionEntry> entries;
  using Key = std::tuple<int, int, bool>;  // handler target native, depth, lasti
  const Key kNone{-1, 0, false};
  Key current = kNone;
  int start = 0;
  for (size_t k = 0; k <= natives.size(); ++k) {
    Key key = kNone;
    if (k < natives.size() && code.instrs[natives[k].instr].handler >= 0) {
      const Handler& h = code.handlers[code.instrs[natives[k].instr].handler];
      key = Key{first_native[h.target], h.depth, h.lasti};
    }
    if (key == current) continue;
    if (current != kNone) {
      entries.push_back(ExceptionEntry{start, offsets[k], offsets[std::get<0>(current)],
                                       std::get<1>(current), std::get<2>(current)});
    }
    current = key;
    start = offsets[k];
  }
  return encode_exception_table(entries);
}

/// Max stack depth by abstract interpretation (mirrors the compiler's stackdepth()).
int stack_depth(const Code& code, const std::vector<Native>& natives,
                const std::vector<int>& first_native, const OpcodeTable& t) {
  const int n = static_cast<int>(natives.size());
  std::vector<int> depth_at(static_cast<size_t>(n), -1);
  std::vector<int> work;
  int max_depth = 0;
  auto reach = [&](int k, int depth, int from) {
    EMBER_INTERNAL_ASSERT(depth >= 0) << "stack underflow after native instruction " << from;
    max_depth = std::max(max_depth, depth);
    if (k >= n) return;
    if (depth_at[k] < 0) {
      depth_at[k] = depth;
      work.push_back(k);
    } else {
      EMBER_INTERNAL_ASSERT(depth_at[k] == depth)
          << "instruction " << natives[k].instr << " reached with stack depths " << depth_at[k]
          << " and " << depth;
    }
  };
  if (n > 0) reach(0, 0, 0);
  while (!work.empty()) {
    int k = work.back();
    work.pop_back();
    const Native& nv = natives[k];
    const int depth = depth_at[k];
    const Instr& in = code.instrs[nv.instr];
    if (in.handler >= 0) {
      const Handler& h = code.handlers[in.handler];
      reach(first_native[h.target], h.depth + (h.lasti ? 1 : 0) + 1, k);
    }
    int effect = PyCompile_OpcodeStackEffectWithJump(nv.opcode, nv.arg, 0);
    EMBER_INTERNAL_ASSERT(effect != INT_MAX) << "no stack effect for opcode " << nv.opcode;
    // 3.11/3.12 report 0 for RETURN_GENERATOR (their compiler adds the generator prefix after
    // computing the depth); it leaves one value for the POP_TOP that follows it.
    if (t.op[nv.opcode] == Op::RETURN_GENERATOR && effect == 0) effect = 1;
    if (nv.target >= 0) {
      int jump_effect = PyCompile_OpcodeStackEffectWithJump(nv.opcode, nv.arg, 1);
      reach(nv.target, depth + jump_effect, k);
    }
    Op op = t.op[nv.opcode];
    bool ends = op == Op::JUMP_FORWARD || op == Op::JUMP_BACKWARD ||
                op == Op::JUMP_BACKWARD_NO_INTERRUPT || op == Op::RETURN_VALUE ||
                op == Op::RETURN_CONST || op == Op::RAISE_VARARGS || op == Op::RERAISE;
    if (ends) {
      max_depth = std::max(max_depth, depth + effect);
    } else {
      reach(k + 1, depth + effect, k);
    }
  }
  return max_depth;
}

PyRef bytes_of(const std::string& s) {
  PyRef b(PyBytes_FromStringAndSize(s.data(), static_cast<Py_ssize_t>(s.size())));
  EMBER_INTERNAL_ASSERT(b) << fetch_python_error();
  return b;
}

void set_item(PyObject* dict, const char* key, PyObject* value) {
  EMBER_INTERNAL_ASSERT(value != nullptr && PyDict_SetItemString(dict, key, value) == 0)
      << fetch_python_error();
}

void set_int(PyObject* dict, const char* key, long value) {
  PyRef v(PyLong_FromLong(value));
  set_item(dict, key, v.get());
}

}  // namespace

PyObject* assemble(const Code& code, PyCodeObject* base, const AssembleOptions& opts) {
  const OpcodeTable& t = opcode_table();
  EMBER_INTERNAL_ASSERT(code.minor == t.minor)
      << "code for 3." << code.minor << " assembled on 3." << t.minor;
  EMBER_INTERNAL_ASSERT(!code.instrs.empty()) << "empty code";

  std::vector<int> first_native;
  std::vector<Native> natives = lower(code, t, first_native);
  std::vector<int> offsets = layout(natives, t);
  const int firstlineno = opts.firstlineno.value_or(base->co_firstlineno);

  PyRef kwargs(PyDict_New());
  EMBER_INTERNAL_ASSERT(kwargs) << fetch_python_error();
  PyObject* kw = kwargs.get();
  set_item(kw, "co_code", bytes_of(write_code(natives, t)).get());
  set_item(kw, "co_linetable", bytes_of(write_locations(natives, t, firstlineno)).get());
  set_item(kw, "co_exceptiontable",
           bytes_of(write_exception_table(code, natives, offsets, first_native)).get());
  set_int(kw, "co_stacksize", stack_depth(code, natives, first_native, t));
  if (opts.consts) set_item(kw, "co_consts", opts.consts);
  if (opts.names) set_item(kw, "co_names", opts.names);
  if (opts.varnames) {
    set_item(kw, "co_varnames", opts.varnames);
    Py_ssize_t nlocals = PyTuple_Size(opts.varnames);
    EMBER_CHECK(nlocals >= 0) << "co_varnames must be a tuple: " << fetch_python_error();
    set_int(kw, "co_nlocals", static_cast<long>(nlocals));
  }
  if (opts.cellvars) set_item(kw, "co_cellvars", opts.cellvars);
  if (opts.freevars) set_item(kw, "co_freevars", opts.freevars);
  if (opts.argcount) set_int(kw, "co_argcount", *opts.argcount);
  if (opts.posonlyargcount) set_int(kw, "co_posonlyargcount", *opts.posonlyargcount);
  if (opts.kwonlyargcount) set_int(kw, "co_kwonlyargcount", *opts.kwonlyargcount);
  if (opts.flags) set_int(kw, "co_flags", *opts.flags);
  if (opts.firstlineno) set_int(kw, "co_firstlineno", *opts.firstlineno);
  if (opts.name) set_item(kw, "co_name", PyRef(PyUnicode_FromString(opts.name->c_str())).get());
  if (opts.qualname) {
    set_item(kw, "co_qualname", PyRef(PyUnicode_FromString(opts.qualname->c_str())).get());
  }

  PyRef replace(PyObject_GetAttrString(reinterpret_cast<PyObject*>(base), "replace"));
  EMBER_INTERNAL_ASSERT(replace) << fetch_python_error();
  PyRef args(PyTuple_New(0));
  PyRef result(PyObject_Call(replace.get(), args.get(), kw));
  EMBER_CHECK(result) << "cannot build the code object: " << fetch_python_error();
  return result.release();
}

}  // namespace ember::capture::bytecode
