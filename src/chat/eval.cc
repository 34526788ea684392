// Expression evaluation.
#include <algorithm>

#include "chat/renderer.h"
#include "chat/builtins.h"
#include "chat/limits.h"
#include "chat/template_error.h"
#include "chat/value_ops.h"

namespace kestrel::chat {

Value Renderer::eval(const Expr& expr, Frame& frame) {
  try {
    return eval_unchecked(expr, frame);
  } catch (const EvalError& e) {
    throw TemplateError(e.message, expr.line, expr.column, e.raised_by_template);
  }
}

Value Renderer::eval_name(const Expr& expr, Frame& frame) {
  if (expr.var.depth >= 0) return frame.at(expr.var);
  return resolve(expr.name);
}

CallArgs Renderer::eval_args(const Arguments& args, Frame& frame) {
  CallArgs out;
  for (const ExprPtr& e : args.positional) out.args.push_back(eval(*e, frame));
  if (args.star) {
    for (Value& v : iterate(eval(*args.star, frame))) out.args.push_back(std::move(v));
  }
  for (const auto& [name, e] : args.keyword) out.kwargs.emplace_back(name, eval(*e, frame));
  if (args.double_star) {
    Value extra = eval(*args.double_star, frame);
    if (!extra.is_dict()) eval_fail("argument after ** must be a mapping, not {}", type_name(extra));
    for (const auto& [k, v] : extra.as_dict().entries) {
      if (!k.is_string()) eval_fail("keywords must be strings");
      out.kwargs.emplace_back(k.as_string(), v);
    }
  }
  return out;
}

Value Renderer::eval_filter(const Expr& expr, Frame& frame, const Value* block_input) {
  Value target;
  const Expr* inner = expr.children[0].get();
  if (inner == nullptr) {
    target = *block_input;
  } else if (inner->kind == ExprKind::kFilter && block_input != nullptr) {
    target = eval_filter(*inner, frame, block_input);
  } else {
    target = eval(*inner, frame);
  }
  CallArgs args = eval_args(expr.args, frame);
  try {
    return apply_filter(expr.name, target, args);
  } catch (const EvalError& e) {
    throw TemplateError(e.message, expr.line, expr.column, e.raised_by_template);
  }
}

Value Renderer::eval_compare(const Expr& expr, Frame& frame) {
  Value left = eval(*expr.children[0], frame);
  for (size_t i = 0; i < expr.compare_ops.size(); ++i) {
    Value right = eval(*expr.children[i + 1], frame);
    bool ok = false;
    switch (expr.compare_ops[i]) {
      case CompareOp::kEq: ok = values_equal(left, right); break;
      case CompareOp::kNe: ok = !values_equal(left, right); break;
      case CompareOp::kLt: ok = values_less(left, right); break;
      case CompareOp::kGt: ok = values_less(right, left); break;
      case CompareOp::kLe: ok = values_less(left, right) || values_equal(left, right); break;
      case CompareOp::kGe: ok = values_less(right, left) || values_equal(left, right); break;
      case CompareOp::kIn: ok = contains(right, left); break;
      case CompareOp::kNotIn: ok = !contains(right, left); break;
    }
    if (!ok) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

Value Renderer::eval_slice(const Expr& expr, Frame& frame) {
  Value target = eval(*expr.children[0], frame);
  std::optional<int64_t> parts[3];
  for (int i = 0; i < 3; ++i) {
    if (!expr.children[i + 1]) continue;
    Value v = eval(*expr.children[i + 1], frame);
    if (v.is_none()) continue;
    if (!(v.is_int() || v.is_bool())) eval_fail("slice indices must be integers or None or have an __index__ method");
    parts[i] = v.as_int();
  }
  return slice_value(target, parts[0], parts[1], parts[2]);
}

Value Renderer::eval_call(const Expr& expr, Frame& frame) {
  Value callee = eval(*expr.children[0], frame);
  CallArgs args = eval_args(expr.args, frame);
  if (callee.is_undefined()) fail_undefined(callee);
  if (!callee.is_function()) eval_fail("'{}' object is not callable", type_name(callee));
  return callee.as_function().fn(args);
}

Value Renderer::eval_unchecked(const Expr& expr, Frame& frame) {
  switch (expr.kind) {
    case ExprKind::kLiteral: return expr.literal;
    case ExprKind::kName: return eval_name(expr, frame);
    case ExprKind::kList:
    case ExprKind::kTuple: {
      ValueList items;
      items.reserve(expr.children.size());
      for (const ExprPtr& e : expr.children) items.push_back(eval(*e, frame));
      return expr.kind == ExprKind::kList ? Value::list(std::move(items)) : Value::tuple(std::move(items));
    }
    case ExprKind::kDict: {
      std::vector<std::pair<Value, Value>> entries;
      for (size_t i = 0; i < expr.children.size(); i += 2) {
        Value key = eval(*expr.children[i], frame);
        Value value = eval(*expr.children[i + 1], frame);
        if ((key.is_list() && !key.as_list().is_tuple) || key.is_dict()) eval_fail("unhashable type: '{}'", type_name(key));
        auto it = std::find_if(entries.begin(), entries.end(), [&](const auto& e) { return values_equal(e.first, key); });
        if (it != entries.end()) it->second = std::move(value);
        else entries.emplace_back(std::move(key), std::move(value));
      }
      return Value::dict(std::move(entries));
    }
    case ExprKind::kAttr: return get_attr(eval(*expr.children[0], frame), expr.name);
    case ExprKind::kItem: return get_item(eval(*expr.children[0], frame), eval(*expr.children[1], frame));
    case ExprKind::kSlice: return eval_slice(expr, frame);
    case ExprKind::kCall: return eval_call(expr, frame);
    case ExprKind::kFilter: return eval_filter(expr, frame, nullptr);
    case ExprKind::kTest: {
      Value target = eval(*expr.children[0], frame);
      return Value::boolean(apply_test(expr.name, target, eval_args(expr.args, frame)));
    }
    case ExprKind::kNeg: return negate(eval(*expr.children[0], frame));
    case ExprKind::kPos: return unary_plus(eval(*expr.children[0], frame));
    case ExprKind::kNot: return Value::boolean(!truthy(eval(*expr.children[0], frame)));
    case ExprKind::kAnd: {
      Value left = eval(*expr.children[0], frame);
      return truthy(left) ? eval(*expr.children[1], frame) : left;
    }
    case ExprKind::kOr: {
      Value left = eval(*expr.children[0], frame);
      return truthy(left) ? left : eval(*expr.children[1], frame);
    }
    case ExprKind::kBinary:
      return binary_op(expr.op, eval(*expr.children[0], frame), eval(*expr.children[1], frame));
    case ExprKind::kCompare: return eval_compare(expr, frame);
    case ExprKind::kConcat: {
      std::string out;
      for (const ExprPtr& e : expr.children) {
        std::string part = py_str(eval(*e, frame));
        check_string_size(out.size(), part.size());
        out += part;
      }
      return Value::string(std::move(out));
    }
    case ExprKind::kCondition: {
      if (truthy(eval(*expr.children[1], frame))) return eval(*expr.children[0], frame);
      if (expr.children[2]) return eval(*expr.children[2], frame);
      return Value::undefined(fmt::format(
          "the inline if-expression on line {} evaluated to false and no else section was defined.", expr.line));
    }
  }
  return Value::none();
}

}  // namespace kestrel::chat
