// Statement execution: output, control flow, assignment, macros and loops.
#include "chat/renderer.h"

#include <algorithm>

#include "chat/builtins.h"
#include "chat/limits.h"
#include "chat/template_error.h"
#include "chat/value_ops.h"

namespace kestrel::chat {

Value& Frame::at(VarRef ref) {
  Frame* f = this;
  for (int i = 0; i < ref.depth; ++i) f = f->parent;
  return f->slots[ref.slot];
}

Renderer::Renderer(const StmtList& root, const Scope& root_scope, const Value& context)
    : root_(root), root_scope_(root_scope), context_(context) {
  KS_ASSERT(context.is_dict());
}

std::string Renderer::render() {
  std::string out;
  exec_list(root_, enter(root_scope_, nullptr), out);
  return out;
}

namespace {

Value missing(const std::string& name) { return Value::undefined(fmt::format("'{}' is undefined", name)); }

void set_namespace_attribute(const Value& ns, const std::string& attribute, Value value) {
  if (!ns.is_namespace()) eval_fail("cannot assign attribute on non-namespace object");
  ns.as_namespace().set(attribute, std::move(value));
}

// `out += text`, refusing output over kMaxStringBytes.
void append(std::string& out, std::string_view text) {
  if (out.size() + text.size() > kMaxStringBytes) {
    eval_fail("the rendered output is over the chat template limit of {} bytes", kMaxStringBytes);
  }
  out += text;
}

[[noreturn]] void rethrow_at(const EvalError& e, const Stmt& stmt) {
  throw TemplateError(e.message, stmt.line, stmt.column, e.raised_by_template);
}

}  // namespace

void Renderer::step() {
  if (++steps_ > kMaxRenderSteps) {
    eval_fail("the template takes too long: over {} loop iterations and macro calls", kMaxRenderSteps);
  }
}

Value Renderer::resolve(const std::string& name) const {
  if (const Value* v = context_.as_dict().find(name)) return *v;
  if (std::optional<Value> global = find_global(name)) return *global;
  return missing(name);
}

Frame& Renderer::enter(const Scope& scope, Frame* parent) {
  Frame& frame = frames_.emplace_back();
  frame.parent = parent;
  frame.slots.reserve(scope.slots.size());
  for (const Slot& slot : scope.slots) {
    switch (slot.init) {
      case SlotInit::kResolve: frame.slots.push_back(resolve(slot.name)); break;
      case SlotInit::kAlias: frame.slots.push_back(parent->at({slot.alias_depth - 1, slot.alias_slot})); break;
      default: frame.slots.push_back(missing(slot.name)); break;
    }
  }
  return frame;
}

Renderer::Flow Renderer::exec_list(const StmtList& body, Frame& frame, std::string& out) {
  for (const StmtPtr& stmt : body) {
    Flow flow = exec(*stmt, frame, out);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

// Renders the body of `stmt` in a new frame of its scope.
std::string Renderer::render_in_scope(const Stmt& stmt, Frame& parent, Frame** scope_frame) {
  Frame& frame = enter(*stmt.scope, &parent);
  if (scope_frame != nullptr) *scope_frame = &frame;
  std::string out;
  exec_list(stmt.bodies[0], frame, out);
  return out;
}

Renderer::Flow Renderer::exec(const Stmt& stmt, Frame& frame, std::string& out) {
  try {
    switch (stmt.kind) {
      case StmtKind::kOutput:
        append(out, stmt.text);
        return Flow::kNormal;
      case StmtKind::kPrint: {
        Value v = eval(*stmt.exprs[0], frame);
        if (v.is_string()) append(out, v.as_string());
        else append(out, py_str(v));
        return Flow::kNormal;
      }
      case StmtKind::kIf:
        for (size_t i = 0; i < stmt.exprs.size(); ++i) {
          if (truthy(eval(*stmt.exprs[i], frame))) return exec_list(stmt.bodies[i], frame, out);
        }
        return exec_list(stmt.bodies.back(), frame, out);
      case StmtKind::kFor:
        return exec_for(stmt, frame, out);
      case StmtKind::kSet:
        exec_set(stmt, frame);
        return Flow::kNormal;
      case StmtKind::kSetBlock: {
        Frame* block = nullptr;
        Value body = Value::string(render_in_scope(stmt, frame, &block));
        if (stmt.exprs[0]) body = eval_filter(*stmt.exprs[0], *block, &body);
        if (stmt.attribute.empty()) {
          frame.slots[stmt.target_slots[0]] = body;
        } else {
          set_namespace_attribute(frame.at(stmt.namespace_ref), stmt.attribute, body);
        }
        return Flow::kNormal;
      }
      case StmtKind::kMacro: {
        Frame* defined_in = &frame;
        ++closures_;
        frame.slots[stmt.name_slot] = Value::function(
            stmt.name, [this, &stmt, defined_in](const CallArgs& args) { return call_macro(stmt, *defined_in, args); });
        return Flow::kNormal;
      }
      case StmtKind::kCallBlock:
        exec_call_block(stmt, frame, out);
        return Flow::kNormal;
      case StmtKind::kFilterBlock: {
        Frame* block = nullptr;
        Value body = Value::string(render_in_scope(stmt, frame, &block));
        append(out, py_str(eval_filter(*stmt.exprs[0], *block, &body)));
        return Flow::kNormal;
      }
      case StmtKind::kWith: {
        ValueList values;
        for (const ExprPtr& e : stmt.exprs) values.push_back(eval(*e, frame));
        Frame& scope = enter(*stmt.scope, &frame);
        for (size_t i = 0; i < values.size(); ++i) scope.slots[stmt.target_slots[i]] = values[i];
        exec_list(stmt.bodies[0], scope, out);
        return Flow::kNormal;
      }
      case StmtKind::kScope:
        append(out, render_in_scope(stmt, frame, nullptr));
        return Flow::kNormal;
      case StmtKind::kBreak:
        return Flow::kBreak;
      case StmtKind::kContinue:
        return Flow::kContinue;
    }
  } catch (const EvalError& e) {
    rethrow_at(e, stmt);
  }
  return Flow::kNormal;
}

void Renderer::assign(Frame& frame, const std::vector<int>& slots, bool unpack, const Value& value) {
  if (!unpack) {
    frame.slots[slots[0]] = value;
    return;
  }
  ValueList items = iterate(value);
  if (items.size() > slots.size()) eval_fail("too many values to unpack (expected {})", slots.size());
  if (items.size() < slots.size()) {
    eval_fail("not enough values to unpack (expected {}, got {})", slots.size(), items.size());
  }
  for (size_t i = 0; i < slots.size(); ++i) frame.slots[slots[i]] = items[i];
}

void Renderer::exec_set(const Stmt& stmt, Frame& frame) {
  Value value = eval(*stmt.exprs[0], frame);
  if (stmt.attribute.empty()) {
    assign(frame, stmt.target_slots, stmt.unpack, value);
    return;
  }
  set_namespace_attribute(frame.at(stmt.namespace_ref), stmt.attribute, std::move(value));
}

Renderer::Flow Renderer::exec_for(const Stmt& stmt, Frame& frame, std::string& out) {
  ValueList items = iterate(eval(*stmt.exprs[0], frame));
  if (stmt.exprs[1]) {  // `for x in xs if cond`: filter first, so loop.length counts survivors
    Frame& test = enter(*stmt.test_scope, &frame);
    ValueList kept;
    for (Value& item : items) {
      step();
      assign(test, stmt.test_target_slots, stmt.unpack, item);
      if (truthy(eval(*stmt.exprs[1], test))) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  int64_t n = static_cast<int64_t>(items.size());
  auto cycle = [](int64_t index0) {
    return Value::function("loop.cycle", [index0](const CallArgs& args) {
      if (args.args.empty()) eval_fail("no items for cycling given");
      return args.args[index0 % static_cast<int64_t>(args.args.size())];
    });
  };
  // The loop object's keys, made once: immutable values may be shared across threads.
  static const Value kIndex = Value::string("index"), kIndex0 = Value::string("index0"),
                     kRevindex = Value::string("revindex"), kRevindex0 = Value::string("revindex0"),
                     kFirst = Value::string("first"), kLast = Value::string("last"),
                     kLength = Value::string("length"), kDepth = Value::string("depth"),
                     kDepth0 = Value::string("depth0"), kCycle = Value::string("cycle"),
                     kPrevitem = Value::string("previtem"), kNextitem = Value::string("nextitem");
  bool completed_an_iteration = false;
  for (int64_t i = 0; i < n; ++i) {
    step();
    const FrameMark mark = mark_frames();
    Frame& scope = enter(*stmt.scope, &frame);
    std::vector<std::pair<Value, Value>> loop = {
        {kIndex, Value::integer(i + 1)},         {kIndex0, Value::integer(i)},
        {kRevindex, Value::integer(n - i)},      {kRevindex0, Value::integer(n - i - 1)},
        {kFirst, Value::boolean(i == 0)},        {kLast, Value::boolean(i == n - 1)},
        {kLength, Value::integer(n)},            {kDepth, Value::integer(1)},
        {kDepth0, Value::integer(0)},            {kCycle, cycle(i)},
    };
    if (i > 0) loop.emplace_back(kPrevitem, items[i - 1]);
    if (i + 1 < n) loop.emplace_back(kNextitem, items[i + 1]);
    scope.slots[stmt.loop_slot] = Value::dict(std::move(loop));
    assign(scope, stmt.target_slots, stmt.unpack, items[i]);
    Flow flow = exec_list(stmt.bodies[0], scope, out);
    drop_frames_since(mark);
    if (flow == Flow::kNormal) completed_an_iteration = true;
    if (flow == Flow::kBreak) break;
  }
  // jinja2 marks an iteration done at the end of its body, so `else` also runs when every
  // iteration ended in break or continue.
  if (!completed_an_iteration) exec_list(stmt.bodies[1], enter(*stmt.else_scope, &frame), out);
  return Flow::kNormal;
}

Value Renderer::call_macro(const Stmt& macro, Frame& defined_in, const CallArgs& args) {
  std::string name = macro.kind == StmtKind::kMacro ? macro.name : "caller";
  // Each call recurses on the C++ stack: unbounded recursion would overflow it.
  if (call_depth_ >= kMaxCallDepth) {
    eval_fail("maximum recursion depth exceeded: macro '{}' called with {} macro calls already running",
              name, kMaxCallDepth);
  }
  step();
  struct DepthGuard {
    int& depth;
    explicit DepthGuard(int& d) : depth(d) { ++depth; }
    ~DepthGuard() { --depth; }
  } depth_guard(call_depth_);
  const FrameMark mark = mark_frames();
  Frame& frame = enter(*macro.scope, &defined_in);
  size_t n = macro.targets.size();
  size_t first_default = n - macro.defaults.size();
  if (args.args.size() > n && macro.varargs_slot < 0) {
    eval_fail("macro '{}' takes not more than {} argument(s)", name, n);
  }
  std::vector<bool> bound(n, false);
  for (size_t i = 0; i < args.args.size() && i < n; ++i) {
    frame.slots[macro.target_slots[i]] = args.args[i];
    bound[i] = true;
  }
  std::vector<std::pair<Value, Value>> extra_kwargs;
  bool got_caller = false;
  for (const auto& [key, value] : args.kwargs) {
    auto it = std::find(macro.targets.begin(), macro.targets.end(), key);
    size_t index = it - macro.targets.begin();
    if (it != macro.targets.end() && !bound[index]) {
      frame.slots[macro.target_slots[index]] = value;
      bound[index] = true;
    } else if (key == "caller" && macro.caller_slot >= 0) {
      frame.slots[macro.caller_slot] = value;
      got_caller = true;
    } else if (macro.kwargs_slot >= 0) {
      extra_kwargs.emplace_back(Value::string(key), value);
    } else {
      eval_fail("macro '{}' takes no keyword argument '{}'", name, key);
    }
  }
  if (macro.caller_slot >= 0 && !got_caller) frame.slots[macro.caller_slot] = Value::undefined("No caller defined");
  if (macro.varargs_slot >= 0) {
    ValueList rest(args.args.size() > n ? args.args.begin() + n : args.args.end(), args.args.end());
    frame.slots[macro.varargs_slot] = Value::tuple(std::move(rest));
  }
  if (macro.kwargs_slot >= 0) frame.slots[macro.kwargs_slot] = Value::dict(std::move(extra_kwargs));
  for (size_t i = 0; i < n; ++i) {
    if (bound[i]) continue;
    frame.slots[macro.target_slots[i]] =
        i >= first_default ? eval(*macro.defaults[i - first_default], frame)
                           : Value::undefined(fmt::format("parameter '{}' was not provided", macro.targets[i]));
  }
  std::string out;
  exec_list(macro.bodies[0], frame, out);
  drop_frames_since(mark);
  return Value::string(std::move(out));
}

void Renderer::exec_call_block(const Stmt& stmt, Frame& frame, std::string& out) {
  const Expr& call = *stmt.exprs[0];
  Frame* call_site = &frame;
  ++closures_;
  Value caller = Value::function(
      "caller", [this, &stmt, call_site](const CallArgs& args) { return call_macro(stmt, *call_site, args); });
  Value callee = eval(*call.children[0], frame);
  CallArgs args = eval_args(call.args, frame);
  args.kwargs.emplace_back("caller", caller);
  if (callee.is_undefined()) fail_undefined(callee);
  if (!callee.is_function()) eval_fail("'{}' object is not callable", type_name(callee));
  append(out, py_str(callee.as_function().fn(args)));
}

}  // namespace kestrel::chat
