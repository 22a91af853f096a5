"""ember's exceptions. The C++ core raises the same classes (see src/python/errors.cpp).

- CompileError: the user's program or call is invalid.
- Unsupported (a CompileError): a valid program ember cannot compile yet. The backend turns it
  into a logged fallback; it reaches the user only where a fallback is not allowed.
- DataDependentError (an Unsupported): a value depends on tensor data while tracing
  (`.item()`, `.tolist()`, data-dependent output shapes).
- InternalError: a bug in ember.
"""


class CompileError(RuntimeError):
    """The user's program or call is invalid."""


class Unsupported(CompileError):
    """A valid program that ember cannot compile yet."""


class DataDependentError(Unsupported):
    """A value depends on tensor data that does not exist while tracing."""


class InternalError(RuntimeError):
    """A bug in ember; please report it."""
