/// \file
/// Python bindings of the bytecode layer (src/capture/bytecode): decode, print, assemble, and the
/// round trip the tests drive.
#include <nanobind/stl/string.h>

#include <nanobind/stl/optional.h>

#include "capture/bytecode/assembler.h"
#include "capture/bytecode/decoder.h"
#include "capture/bytecode/opcode_table.h"
#include "capture/bytecode/printer.h"
#include "python/capture_core/capture_core.h"
#include "support/error.h"

namespace nb = nanobind;

namespace ember::python {
namespace {

namespace bc = ember::capture::bytecode;

PyCodeObject* as_code(const nb::handle& h) {
  EMBER_CHECK(PyCode_Check(h.ptr())) << "expected a code object, got " << Py_TYPE(h.ptr())->tp_name;
  return reinterpret_cast<PyCodeObject*>(h.ptr());
}

nb::tuple position_tuple(const bc::Position& p) {
  return nb::make_tuple(p.line, p.end_line, p.col, p.end_col);
}

bc::Position position_from(nb::handle t) {
  nb::tuple p = nb::cast<nb::tuple>(t);
  EMBER_CHECK(p.size() == 4) << "a position is (line, end_line, col, end_col)";
  return bc::Position{nb::cast<int32_t>(p[0]), nb::cast<int32_t>(p[1]), nb::cast<int32_t>(p[2]),
                      nb::cast<int32_t>(p[3])};
}

/// A Code from the tuples `instructions()` and `handlers()` return. Positions: `positions[i]`
/// when given, else the line of the tuple (no columns).
bc::Code code_from(const nb::list& instrs, const nb::list& handlers,
                   const std::optional<nb::list>& positions) {
  bc::Code c;
  c.minor = bc::opcode_table().minor;
  for (size_t i = 0; i < instrs.size(); ++i) {
    nb::tuple t = nb::cast<nb::tuple>(instrs[i]);
    EMBER_CHECK(t.size() == 8) << "an instruction is (op, arg, flags, kwnames, target, handler, "
                                  "offset, line)";
    bc::Instr in;
    in.op = bc::op_from_name(nb::cast<std::string>(t[0]));
    in.arg = nb::cast<int32_t>(t[1]);
    in.flags = nb::cast<uint8_t>(t[2]);
    in.kwnames = nb::cast<int32_t>(t[3]);
    in.target = nb::cast<int32_t>(t[4]);
    in.handler = nb::cast<int32_t>(t[5]);
    in.offset = nb::cast<int32_t>(t[6]);
    if (positions) {
      in.pos = position_from((*positions)[i]);
    } else {
      int32_t line = nb::cast<int32_t>(t[7]);
      in.pos = bc::Position{line, line, -1, -1};
    }
    c.instrs.push_back(in);
  }
  for (nb::handle h : handlers) {
    nb::tuple t = nb::cast<nb::tuple>(h);
    c.handlers.push_back(
        bc::Handler{nb::cast<int32_t>(t[0]), nb::cast<int32_t>(t[1]), nb::cast<bool>(t[2])});
  }
  return c;
}

}  // namespace

void bind_bytecode(nb::module_& m) {
  bc::init_opcode_table();

  m.def(
      "decode_print",
      [](nb::handle code) { return bc::print(bc::decode(as_code(code)), as_code(code)); },
      nb::arg("code"), "The normalised IR of `code` as text (printer.h).");
  m.def(
      "instructions",
      [](nb::handle code) {
        bc::Code c = bc::decode(as_code(code));
        nb::list out;
        for (const bc::Instr& in : c.instrs) {
          out.append(nb::make_tuple(std::string(bc::op_name(in.op)), in.arg, in.flags, in.kwnames,
                                    in.target, in.handler, in.offset, in.pos.line));
        }
        return out;
      },
      nb::arg("code"),
      "The decoded instructions: (op_name, arg, flags, kwnames, target, handler, offset, line).");
  m.def(
      "positions",
      [](nb::handle code) {
        bc::Code c = bc::decode(as_code(code));
        nb::list out;
        for (const bc::Instr& in : c.instrs) out.append(position_tuple(in.pos));
        return out;
      },
      nb::arg("code"), "Per decoded instruction: (line, end_line, col, end_col), -1 if unknown.");
  m.def(
      "handlers",
      [](nb::handle code) {
        bc::Code c = bc::decode(as_code(code));
        nb::list out;
        for (const bc::Handler& h : c.handlers)
          out.append(nb::make_tuple(h.target, h.depth, h.lasti));
        return out;
      },
      nb::arg("code"), "The decoded exception handlers: (target, depth, lasti).");
  m.def(
      "roundtrip",
      [](nb::handle code) {
        PyCodeObject* co = as_code(code);
        return nb::steal(bc::assemble(bc::decode(co), co));
      },
      nb::arg("code"), "assemble(decode(code)) with nothing changed: a new, equal code object.");
  m.def(
      "assemble",
      [](nb::handle base, nb::list instrs, nb::list handlers, std::optional<nb::list> positions,
         std::optional<nb::tuple> consts, std::optional<nb::tuple> names,
         std::optional<nb::tuple> varnames, std::optional<int> argcount, std::optional<int> flags,
         std::optional<int> firstlineno, std::optional<std::string> name) {
        bc::AssembleOptions opts;
        opts.consts = consts ? consts->ptr() : nullptr;
        opts.names = names ? names->ptr() : nullptr;
        opts.varnames = varnames ? varnames->ptr() : nullptr;
        opts.argcount = argcount;
        opts.flags = flags;
        opts.firstlineno = firstlineno;
        opts.name = name;
        opts.qualname = name;
        return nb::steal(bc::assemble(code_from(instrs, handlers, positions), as_code(base), opts));
      },
      nb::arg("base"), nb::arg("instrs"), nb::arg("handlers"), nb::arg("positions") = nb::none(),
      nb::arg("consts") = nb::none(), nb::arg("names") = nb::none(),
      nb::arg("varnames") = nb::none(), nb::arg("argcount") = nb::none(),
      nb::arg("flags") = nb::none(), nb::arg("firstlineno") = nb::none(),
      nb::arg("name") = nb::none(),
      "A code object from instruction and handler tuples (as `instructions()` and `handlers()` "
      "return them) with the rest of `base`; `name` sets co_name and co_qualname.");
  m.def(
      "bytecode_python_minor", [] { return bc::opcode_table().minor; },
      "The CPython minor version the opcode tables were built for.");
}

}  // namespace ember::python
