#include "capture/hook/logs.h"

#include <Python.h>

#include <cstdlib>

namespace ember::capture {

namespace {

std::string& topics() {
  static std::string* t = new std::string;  // never destroyed: logs may come during finalisation
  return *t;
}

HeldLogs*& holder() {
  static HeldLogs* h = nullptr;  // guarded by the GIL
  return h;
}

}  // namespace

void set_log_topics(const std::string& t) {
  topics() = t;
}

bool log_enabled(const char* topic) {
  if (topics().empty()) return false;
  std::string logs = "," + topics() + ",";
  return logs.find(std::string(",") + topic + ",") != std::string::npos ||
         logs.find(",all,") != std::string::npos;
}

HeldLogs::HeldLogs() : outer_(holder()) {
  holder() = this;
}

HeldLogs::~HeldLogs() {
  if (holding_) take();
}

std::vector<std::string> HeldLogs::take() {
  if (holding_) {
    holding_ = false;
    holder() = outer_;
  }
  return std::move(messages_);
}

void HeldLogs::release() {
  for (const std::string& m : take()) log_warning(m);
}

void log_warning(const std::string& msg) {
  if (holder() != nullptr) {
    holder()->messages_.push_back(msg);
    return;
  }
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
