/// \file
/// FrameView: slot reads of a frame that has not started (see frame_hook.h).
#include <Python.h>

#include "capture/hook/frame_hook.h"

namespace ember::capture {
namespace {

// co_localspluskinds bits (Include/internal/pycore_code.h, the same on 3.11 to 3.13).
constexpr unsigned char kFastFree = 0x80;

// The cell a free-variable slot will hold once COPY_FREE_VARS has run, or nullptr for another slot.
PyObject* free_cell(const FrameView& f, int i) {
  auto kinds =
      reinterpret_cast<const unsigned char*>(PyBytes_AS_STRING(f.code->co_localspluskinds));
  if ((kinds[i] & kFastFree) == 0) return nullptr;
  if (f.closure == nullptr) return nullptr;
  Py_ssize_t j = i - (f.nlocalsplus - f.code->co_nfreevars);
  if (j < 0 || j >= PyTuple_GET_SIZE(f.closure)) return nullptr;
  return PyTuple_GET_ITEM(f.closure, j);
}

}  // namespace

PyObject* FrameView::local(int i) const {
  if (i < 0 || i >= nlocalsplus) return nullptr;
  if (PyObject* cell = free_cell(*this, i)) return cell;
  return localsplus[i];
}

PyObject* FrameView::value(int i) const {
  if (i < 0 || i >= nlocalsplus) return nullptr;
  if (PyObject* cell = free_cell(*this, i)) return PyCell_GET(cell);
  // Argument cells still hold the raw argument (MAKE_CELL has not run); other cells are unbound.
  return localsplus[i];
}

}  // namespace ember::capture
