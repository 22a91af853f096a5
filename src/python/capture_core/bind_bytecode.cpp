/// \file
/// Python bindings of the bytecode layer (src/capture/bytecode): decode, print, assemble, and the
/// round trip the tests drive.
#include <nanobind/stl/string.h>

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
      "bytecode_python_minor", [] { return bc::opcode_table().minor; },
      "The CPython minor version the opcode tables were built for.");
}

}  // namespace ember::python
