/// \file
/// ember._capture_core: the torch-free part of capture (frame hook, bytecode IR) as a module of
/// its own, so that it is tested on every supported CPython, with or without torch.
#include "python/capture_core/capture_core.h"

NB_MODULE(_capture_core, m) {
  m.doc() = "ember's frame hook and bytecode layer (no torch)";
  ember::python::bind_bytecode(m);
  ember::python::bind_frame_hook(m);
}
