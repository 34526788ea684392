// The syntax tree of a parsed template. Immutable after parsing, so one tree can be rendered by
// several threads at once.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/value.h"
#include "chat/value_ops.h"

namespace kestrel::chat {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using StmtList = std::vector<StmtPtr>;

struct Arguments {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
  ExprPtr star;         // *args
  ExprPtr double_star;  // **kwargs
};

enum class ExprKind {
  kLiteral,    // literal
  kName,       // name
  kList,       // children: items
  kTuple,      // children: items
  kDict,       // children: key0, value0, key1, value1, ...
  kAttr,       // children[0].name
  kItem,       // children[0][children[1]]
  kSlice,      // children[0][children[1]:children[2]:children[3]], missing parts are null
  kCall,       // children[0](args)
  kFilter,     // children[0] | name(args); children[0] is null inside a filter block
  kTest,       // children[0] is name(args)
  kNeg,        // -children[0]
  kPos,        // +children[0]
  kNot,        // not children[0]
  kAnd,        // children[0] and children[1]
  kOr,         // children[0] or children[1]
  kBinary,     // children[0] op children[1]
  kCompare,    // children[0] compare_ops[0] children[1] compare_ops[1] children[2] ...
  kConcat,     // children joined with ~
  kCondition,  // children[0] if children[1] else children[2] (children[2] may be null)
};

enum class CompareOp { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

// A scope's variables, resolved before rendering the way jinja2's compiler resolves them
// (idtracking.py): every name a scope loads or stores gets a slot, and each slot is
// initialised when the scope is entered.
enum class SlotInit {
  kParameter,  // bound by the statement (loop target, macro argument, `with` target)
  kResolve,    // looked up in the render context and globals
  kAlias,      // copied from an enclosing scope's slot
  kUndefined,  // undefined until assigned
};

struct Slot {
  std::string name;
  SlotInit init = SlotInit::kUndefined;
  int alias_depth = 0;  // kAlias: scopes up, and the slot there
  int alias_slot = -1;
};

struct Scope {
  std::vector<Slot> slots;
  int find(const std::string& name) const;
};

// Where a name lives at render time: `depth` scopes up from the current one, at `slot`.
struct VarRef {
  int depth = -1;
  int slot = -1;
};

struct Expr {
  ExprKind kind;
  int line = 0;
  int column = 0;
  Value literal;
  std::string name;
  BinaryOp op = BinaryOp::kAdd;
  std::vector<CompareOp> compare_ops;
  std::vector<ExprPtr> children;
  Arguments args;
  VarRef var;  // kName, after scope analysis
  int depth = 1;  // nodes on the longest path to a leaf (the parser caps it: chat/limits.h)
};

enum class StmtKind {
  kOutput,       // text
  kPrint,        // exprs[0]
  kIf,           // exprs: conditions; bodies: one per condition, then the else body
  kFor,          // targets in exprs[0] [if exprs[1]]; bodies: loop body, else body
  kSet,          // targets (or namespace targets[0].attribute) = exprs[0]
  kSetBlock,     // targets[0] (or targets[0].attribute) = bodies[0] rendered, through filter exprs[0] (may be null)
  kMacro,        // name(targets = defaults) bodies[0]
  kCallBlock,    // exprs[0] is the call; caller(targets = defaults) renders bodies[0]
  kFilterBlock,  // bodies[0] rendered, then through the filter chain exprs[0]
  kWith,         // targets[i] = exprs[i] in a new scope around bodies[0]
  kScope,        // bodies[0] in a new scope (the `generation` tag of Hugging Face's templates)
  kBreak,
  kContinue,
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  int column = 0;
  std::string text;
  std::string name;
  std::string attribute;  // kSet on a namespace: `set ns.attribute = ...`
  std::vector<std::string> targets;
  bool unpack = false;  // the target was a tuple: `for k, v in ...`, `set a, b = ...`
  std::vector<ExprPtr> exprs;
  std::vector<ExprPtr> defaults;  // macro/caller parameter defaults, aligned with the last targets
  std::vector<StmtList> bodies;

  // Filled by scope analysis.
  std::vector<int> target_slots;       // targets: in `scope` for for/with/macro/call, else the current one
  std::vector<int> test_target_slots;  // for: the targets in `test_scope`
  VarRef namespace_ref;                // set ns.attribute: where `ns` lives
  int name_slot = -1;                  // macro: its name in the current scope
  int loop_slot = -1;                  // for: `loop` in `scope`
  int caller_slot = -1, varargs_slot = -1, kwargs_slot = -1;  // macro/call: special parameters
  std::unique_ptr<Scope> scope;        // for body, macro, call, filter, block set, with, generation
  std::unique_ptr<Scope> else_scope;   // for
  std::unique_ptr<Scope> test_scope;   // for ... if test
};

}  // namespace kestrel::chat
