// Resolves every variable of a parsed template to a slot of a scope, reproducing the static
// scoping of jinja2's compiler (idtracking.py). This is what makes, for example, a name that
// the template assigns at the top level *later* read as undefined inside an earlier loop, and
// `{% set x = x + 1 %}` in a loop body start each iteration from the enclosing value.
//
// Scopes: the template, each for-loop body (plus its `else` and `if` filter), macro, call
// block, filter block, block set, `with` and `generation` body. `if` shares its scope.
#pragma once

#include "chat/ast.h"

namespace kestrel::chat {

// Fills Expr::var of every name and the slot fields of statements; returns the template's
// top-level scope.
std::unique_ptr<Scope> analyze_scopes(StmtList& root);

}  // namespace kestrel::chat
