// Renders a parsed template. One Renderer per render call: it owns that call's frames and
// namespaces, while the tree it walks is shared and read-only.
//
// Every variable was resolved to a scope slot before rendering (scope_analysis.h); a Frame is
// one live instance of a scope (the template, one loop iteration, one macro call, ...).
#pragma once

#include <deque>
#include <string>
#include <vector>

#include "chat/ast.h"
#include "chat/value.h"

namespace kestrel::chat {

struct Frame {
  Frame* parent = nullptr;
  std::vector<Value> slots;

  Value& at(VarRef ref);
};

class Renderer {
 public:
  // `context` must be a dict; its entries are the template's variables.
  Renderer(const StmtList& root, const Scope& root_scope, const Value& context);

  // Throws TemplateError.
  std::string render();

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  // A new frame for `scope`, its slots initialised as jinja2 does on entering a scope. Frames
  // live until the render ends, so macros may keep pointing at the frame they were defined in.
  Frame& enter(const Scope& scope, Frame* parent);
  Value resolve(const std::string& name) const;

  Flow exec_list(const StmtList& body, Frame& frame, std::string& out);
  Flow exec(const Stmt& stmt, Frame& frame, std::string& out);
  Flow exec_for(const Stmt& stmt, Frame& frame, std::string& out);
  void exec_set(const Stmt& stmt, Frame& frame);
  void exec_call_block(const Stmt& stmt, Frame& frame, std::string& out);
  std::string render_in_scope(const Stmt& stmt, Frame& parent, Frame** scope_frame);
  void assign(Frame& frame, const std::vector<int>& slots, bool unpack, const Value& value);
  // Calls a macro (or a call block's caller) defined in `frame`.
  Value call_macro(const Stmt& macro, Frame& frame, const CallArgs& args);

  // Expressions (eval.cc). Errors are reported at the innermost failing expression.
  Value eval(const Expr& expr, Frame& frame);
  Value eval_unchecked(const Expr& expr, Frame& frame);
  Value eval_name(const Expr& expr, Frame& frame);
  Value eval_compare(const Expr& expr, Frame& frame);
  Value eval_slice(const Expr& expr, Frame& frame);
  Value eval_call(const Expr& expr, Frame& frame);
  CallArgs eval_args(const Arguments& args, Frame& frame);
  // A filter chain; the innermost target is `block_input` when the chain has no target
  // (filter blocks, `{% set x | f %}`).
  Value eval_filter(const Expr& expr, Frame& frame, const Value* block_input);

  // One unit of kMaxRenderSteps (a loop iteration or a macro call); throws EvalError when
  // the render has used them all.
  void step();

  // A loop iteration or macro call marks the frames before it enters its scope and drops the
  // frames made since when it ends, unless it made a closure (which points into them).
  struct FrameMark {
    size_t frames;
    uint64_t closures;
  };
  FrameMark mark_frames() const { return {frames_.size(), closures_}; }
  void drop_frames_since(const FrameMark& mark) {
    if (closures_ == mark.closures) frames_.resize(mark.frames);
  }

  const StmtList& root_;
  const Scope& root_scope_;
  const Value& context_;
  std::deque<Frame> frames_;
  // Closures (macros, call-block callers) made so far: each keeps a pointer to its frame. A
  // loop iteration or macro call that made none drops its frames when it ends, so long loops
  // do not keep every iteration's scope alive.
  uint64_t closures_ = 0;
  int call_depth_ = 0;   // macro calls now running (limits.h: kMaxCallDepth)
  int64_t steps_ = 0;    // loop iterations and macro calls so far (kMaxRenderSteps)
};

}  // namespace kestrel::chat
