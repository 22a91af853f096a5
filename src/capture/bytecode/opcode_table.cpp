#include "capture/bytecode/opcode_table.h"

#include <Python.h>

#include <memory>
#include <string_view>
#include <unordered_map>

#include "capture/bytecode/compiled_opcodes.h"
#include "capture/bytecode/py_ref.h"
#include "support/error.h"

namespace ember::capture::bytecode {
namespace {

std::unique_ptr<OpcodeTable> g_table;

PyRef import_attr(const char* module, const char* attr) {
  PyRef m(PyImport_ImportModule(module));
  EMBER_INTERNAL_ASSERT(m) << "cannot import " << module << ": " << fetch_python_error();
  PyRef a(PyObject_GetAttrString(m.get(), attr));
  EMBER_INTERNAL_ASSERT(a) << module << "." << attr << ": " << fetch_python_error();
  return a;
}

long as_long(PyObject* o) {
  long v = PyLong_AsLong(o);
  EMBER_INTERNAL_ASSERT(!(v == -1 && PyErr_Occurred())) << fetch_python_error();
  return v;
}

std::string as_string(PyObject* o) {
  const char* s = PyUnicode_AsUTF8(o);
  EMBER_INTERNAL_ASSERT(s != nullptr) << fetch_python_error();
  return s;
}

/// Calls `fn(item)` for each item of a sequence.
template <typename F>
void for_each(PyObject* seq, F&& fn) {
  PyRef it(PyObject_GetIter(seq));
  EMBER_INTERNAL_ASSERT(it) << fetch_python_error();
  while (PyRef item{PyIter_Next(it.get())}) fn(item.get());
  EMBER_INTERNAL_ASSERT(!PyErr_Occurred()) << fetch_python_error();
}

std::unique_ptr<OpcodeTable> build_table() {
  auto t = std::make_unique<OpcodeTable>();
  t->native.fill(-1);
  t->op.fill(Op::NOP);

  PyRef version = import_attr("sys", "version_info");
  PyRef minor(PyObject_GetAttrString(version.get(), "minor"));
  EMBER_INTERNAL_ASSERT(minor) << fetch_python_error();
  t->minor = static_cast<int>(as_long(minor.get()));
  EMBER_INTERNAL_ASSERT(t->minor == PY_MINOR_VERSION)
      << "ember._capture_core was compiled for CPython 3." << PY_MINOR_VERSION << " but runs on 3."
      << t->minor;
  EMBER_INTERNAL_ASSERT(t->minor >= 11 && t->minor <= 13)
      << "the bytecode layer supports CPython 3.11 to 3.13, not 3." << t->minor;

  // opmap: every name must be one ember knows (ops.def), else this is an unaudited version.
  PyRef opmap = import_attr("opcode", "opmap");
  PyObject *key = nullptr, *value = nullptr;
  Py_ssize_t pos = 0;
  std::unordered_map<std::string, int> numbers;
  while (PyDict_Next(opmap.get(), &pos, &key, &value)) {
    std::string name = as_string(key);
    int number = static_cast<int>(as_long(value));
    Op op = op_from_name(name);
    numbers[name] = number;
    t->native[static_cast<size_t>(op)] = static_cast<int16_t>(number);
    if (number < 256) {
      t->op[number] = op;
      t->valid[number] = true;
    }
  }

  // Checks against the opcode.h this extension was compiled with.
  long have_argument = as_long(import_attr("opcode", "HAVE_ARGUMENT").get());
  for (auto [name, compiled] : compiled_opcode_numbers()) {
    std::string_view n = name;
    auto it = numbers.find(name);
    int running = n == "HAVE_ARGUMENT"  ? static_cast<int>(have_argument)
                  : it == numbers.end() ? -1
                                        : it->second;
    EMBER_INTERNAL_ASSERT(running == compiled)
        << "opcode " << name << " is " << running << " in the running interpreter but " << compiled
        << " in the opcode.h ember was compiled with";
  }
  t->extended_arg = numbers.at("EXTENDED_ARG");

  // Inline caches: a list indexed by opcode (3.11, 3.12) or a dict by name (3.13).
  PyRef caches = import_attr("opcode", "_inline_cache_entries");
  if (PyDict_Check(caches.get())) {
    pos = 0;
    while (PyDict_Next(caches.get(), &pos, &key, &value)) {
      auto it = numbers.find(as_string(key));
      if (it == numbers.end() || it->second >= 256) continue;  // specialised forms
      t->caches[it->second] = static_cast<uint8_t>(as_long(value));
    }
  } else {
    int i = 0;
    for_each(caches.get(), [&](PyObject* v) {
      if (i < 256) t->caches[i] = static_cast<uint8_t>(as_long(v));
      ++i;
    });
  }

  // Opargs: dis.hasarg (3.12+) or HAVE_ARGUMENT (3.11).
  PyRef dis(PyImport_ImportModule("dis"));
  EMBER_INTERNAL_ASSERT(dis) << fetch_python_error();
  if (PyObject_HasAttrString(dis.get(), "hasarg")) {
    for_each(import_attr("dis", "hasarg").get(), [&](PyObject* v) {
      long n = as_long(v);
      if (n < 256) t->has_arg[n] = true;
    });
  } else {
    for (int i = have_argument; i < 256; ++i) t->has_arg[i] = true;
  }
  for_each(import_attr("dis", "hasjrel").get(), [&](PyObject* v) {
    long n = as_long(v);
    if (n < 256) t->jrel[n] = true;
  });
  EMBER_INTERNAL_ASSERT(PySequence_Size(import_attr("dis", "hasjabs").get()) == 0)
      << "absolute jumps are not expected on CPython 3.11+";
  for (const auto& [name, number] : numbers) {
    if (number < 256 && t->jrel[number] && name.find("BACKWARD") != std::string::npos) {
      t->backward[number] = true;
    }
  }

  for_each(import_attr("opcode", "_nb_ops").get(), [&](PyObject* v) {
    EMBER_INTERNAL_ASSERT(PyTuple_Check(v) && PyTuple_GET_SIZE(v) == 2);
    t->nb_ops.push_back(as_string(PyTuple_GET_ITEM(v, 1)));
  });
  for_each(import_attr("opcode", "cmp_op").get(),
           [&](PyObject* v) { t->cmp_ops.push_back(as_string(v)); });

  // Per-Op facts of the normalised IR.
  for (size_t i = 0; i < kNumOps; ++i) {
    int n = t->native[i];
    if (n >= 0 && n < 256) {
      t->op_has_arg[i] = t->has_arg[n];
      t->op_is_jump[i] = t->jrel[n];
    }
  }
  for (Op op : {Op::JUMP, Op::JUMP_NO_INTERRUPT, Op::POP_JUMP_IF_TRUE, Op::POP_JUMP_IF_FALSE,
                Op::POP_JUMP_IF_NONE, Op::POP_JUMP_IF_NOT_NONE}) {
    t->op_has_arg[static_cast<size_t>(op)] = true;
    t->op_is_jump[static_cast<size_t>(op)] = true;
  }
  t->op_has_arg[static_cast<size_t>(Op::LOAD_METHOD)] = true;
  return t;
}

}  // namespace

void init_opcode_table() {
  if (!g_table) {
    auto t = build_table();
    if (!g_table) g_table = std::move(t);
  }
}

const OpcodeTable& opcode_table() {
  init_opcode_table();
  return *g_table;
}

Op op_from_name(std::string_view name) {
  static const std::unordered_map<std::string_view, Op> kByName = [] {
    std::unordered_map<std::string_view, Op> m;
    for (size_t i = 0; i < kNumOps; ++i) m.emplace(op_name(static_cast<Op>(i)), static_cast<Op>(i));
    return m;
  }();
  auto it = kByName.find(name);
  EMBER_INTERNAL_ASSERT(it != kByName.end())
      << "unknown opcode " << name << " (not in ops.def: an unaudited CPython version?)";
  return it->second;
}

bool op_has_arg(Op op) {
  return opcode_table().op_has_arg[static_cast<size_t>(op)];
}

bool op_is_jump(Op op) {
  return opcode_table().op_is_jump[static_cast<size_t>(op)];
}

}  // namespace ember::capture::bytecode
