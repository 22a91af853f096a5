/// \file
/// The three tiers of errors (see docs/design/errors.md):
///  - user errors: the user's program or call is invalid       -> ember.CompileError
///  - unsupported: a valid program ember cannot compile yet     -> ember.Unsupported
///  - internal errors: a bug in ember                           -> ember.InternalError
/// The macros are stream-style: the message is built only when the check fails. They stay on in
/// release builds and throw; they never abort the interpreter.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace ember {

/// Base of every error ember raises on purpose.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The user's program or call is invalid.
class UserError : public Error {
 public:
  using Error::Error;
};

/// A valid program that ember cannot compile yet; callers turn it into a fallback.
class Unsupported : public Error {
 public:
  using Error::Error;
};

/// A value depends on tensor data that does not exist while tracing (`.item()`, `.tolist()`).
class DataDependentError : public Unsupported {
 public:
  using Unsupported::Unsupported;
};

/// A bug in ember.
class InternalError : public Error {
 public:
  using Error::Error;
};

namespace detail {

/// Collects a message and throws `E` when destroyed. Used only through the macros below.
template <typename E>
class ErrorBuilder {
 public:
  ErrorBuilder(const char* file, int line, const char* cond) : file_(file), line_(line) {
    if (cond != nullptr) cond_ = cond;
  }
  ErrorBuilder(const ErrorBuilder&) = delete;
  ErrorBuilder& operator=(const ErrorBuilder&) = delete;

  template <typename T>
  ErrorBuilder& operator<<(const T& v) {
    msg_ << v;
    return *this;
  }

  [[noreturn]] ~ErrorBuilder() noexcept(false) {
    std::string text = msg_.str();
    if constexpr (std::is_same_v<E, InternalError>) {
      std::ostringstream full;
      full << "internal error in ember at " << file_ << ":" << line_;
      if (!cond_.empty()) full << ": check failed: " << cond_;
      if (!text.empty()) full << ": " << text;
      full << "\nthis is a bug in ember; please report it";
      throw E(full.str());
    } else {
      throw E(text);
    }
  }

 private:
  const char* file_;
  int line_;
  std::string cond_;
  std::ostringstream msg_;
};

}  // namespace detail
}  // namespace ember

// `if (ok) ; else throw` keeps the macros usable as single statements followed by `<< msg`.
#define EMBER_THROW_IF_NOT_(cond, E, text) \
  if (cond) {                              \
  } else                                   \
    ::ember::detail::ErrorBuilder<E>(__FILE__, __LINE__, text)

/// User error: the user's program or call is invalid.
#define EMBER_CHECK(cond) EMBER_THROW_IF_NOT_(cond, ::ember::UserError, nullptr)
/// Unsupported: valid, but not compiled by ember yet; becomes a fallback with this reason.
#define EMBER_UNSUPPORTED(cond) EMBER_THROW_IF_NOT_(cond, ::ember::Unsupported, nullptr)
/// Internal error: an invariant of ember itself is broken.
#define EMBER_INTERNAL_ASSERT(cond) EMBER_THROW_IF_NOT_(cond, ::ember::InternalError, #cond)
