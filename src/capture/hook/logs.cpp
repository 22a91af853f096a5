#include "capture/hook/logs.h"

#include <Python.h>

#include <cstdlib>

namespace ember::capture {

bool log_enabled(const char* topic) {
  const char* env = std::getenv("EMBER_LOGS");
  if (env == nullptr) return false;
  std::string logs = std::string(",") + env + ",";
  return logs.find(std::string(",") + topic + ",") != std::string::npos ||
         logs.find(",all,") != std::string::npos;
}

void log_warning(const std::string& msg) {
  PyObject* type = nullptr;
  PyObject* value = nullptr;
  PyObject* tb = nullptr;
  PyErr_Fetch(&type, &value, &tb);
  PyObject* logging = PyImport_ImportModule("logging");
  if (logging != nullptr) {
    PyObject* logger = PyObject_CallMethod(logging, "getLogger", "s", "ember");
    if (logger != nullptr) {
      PyObject* r = PyObject_CallMethod(logger, "warning", "s", msg.c_str());
      Py_XDECREF(r);
      Py_DECREF(logger);
    }
    Py_DECREF(logging);
  }
  PyErr_Clear();
  PyErr_Restore(type, value, tb);
}

}  // namespace ember::capture
