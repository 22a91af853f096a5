/// \file
/// Reads the text form of printer.h back into IR, so passes can be tested from text.
///
/// Grammar (tokens are separated by optional whitespace; `#` starts a comment to end of line):
///
///   kernel     := 'kernel' NAME '(' [NAME {',' NAME}] ')' ['combo'] '{' {param} {stmt} '}'
///   param      := ROLE NAME ':' DTYPE dims 'strides' dims      ROLE: input output inout temp
///   dims       := '[' [expr {',' expr}] ']'
///   body       := '{' {stmt} '}'                    one statement, or a Block of several
///   stmt       := 'for' '(' NAME ',' expr ',' expr ')' [KIND] body
///               | 'let' NAME '=' expr body
///               | 'if' expr body ['else' body]
///               | 'alloc' NAME ':' DTYPE dims body
///               | 'accumulate' OP names '[' expr ']' '<-' values
///               | NAME '[' expr ']' '=' expr
///   names      := NAME | '(' NAME {',' NAME} ')'
///   values     := expr                              when OP takes one value
///               | '(' expr {',' expr} ')'           otherwise
///   expr       := ['-'] INT | 'true' | 'false' | DTYPE '(' ['-'] NUMBER ')'
///               | '(' expr BINOP expr ')' | '!' expr
///               | ('min' | 'max') '(' expr ',' expr ')' | 'select' '(' expr ',' expr ',' expr ')'
///               | 'cast' '<' DTYPE '>' '(' expr ')' | NAME '[' expr ']' | FN '(' expr {',' expr}
///               ')' | NAME
///   BINOP      := + - * / // % < <= == != && ||
///   NUMBER     := INT | decimal or exponent float | inf | nan
///
/// A bare NAME is the innermost For/Let variable of that name, else a size variable of the
/// kernel. A Load takes its dtype from the buffer's declaration. `<-` is one token: write
/// `x < -1` with a space. The keywords above are reserved as names.
///
/// Errors are UserErrors "line L:C: <what>", also for text that parses but builds invalid IR
/// (say, `(x + f32(1))` with an i64 x).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "loop/stmt.h"

namespace ember::loop {

Kernel parse_kernel(std::string_view text);

/// What a standalone expression may refer to.
struct ParseScope {
  std::vector<std::string> size_vars;
  std::map<std::string, DType> vars;     ///< variables and their dtypes
  std::map<std::string, DType> buffers;  ///< buffers and their element dtypes
};

/// Parses one expression; the whole text must be consumed.
Expr parse_expr(std::string_view text, const ParseScope& scope = {});

}  // namespace ember::loop
