// Python arithmetic on template values: + - * / // % ** and unary minus/plus.
#include <cmath>
#include <cstdint>

#include "chat/limits.h"
#include "chat/py_format.h"
#include "chat/value_ops.h"

namespace kestrel::chat {

namespace {

const char* op_symbol(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd: return "+";
    case BinaryOp::kSub: return "-";
    case BinaryOp::kMul: return "*";
    case BinaryOp::kDiv: return "/";
    case BinaryOp::kFloorDiv: return "//";
    case BinaryOp::kMod: return "%";
    case BinaryOp::kPow: return "**";
  }
  return "?";
}

[[noreturn]] void fail_operands(BinaryOp op, const Value& a, const Value& b) {
  if (op == BinaryOp::kAdd && a.is_string() && !b.is_string()) {
    eval_fail("can only concatenate str (not \"{}\") to str", type_name(b));
  }
  eval_fail("unsupported operand type(s) for {}: '{}' and '{}'", op_symbol(op), type_name(a),
            type_name(b));
}

Value int_result(bool overflow, int64_t result) {
  if (overflow) eval_fail("integer overflow (only 64-bit integers are supported)");
  return Value::integer(result);
}

Value int_pow(int64_t base, int64_t exponent) {
  if (exponent < 0) {
    if (base == 0) eval_fail("0.0 cannot be raised to a negative power");
    return Value::number(std::pow(static_cast<double>(base), static_cast<double>(exponent)));
  }
  int64_t result = 1;
  bool overflow = false;
  while (exponent > 0) {
    if (exponent & 1) overflow |= __builtin_mul_overflow(result, base, &result);
    exponent >>= 1;
    if (exponent > 0) overflow |= __builtin_mul_overflow(base, base, &base);
  }
  return int_result(overflow, result);
}

Value numeric_op(BinaryOp op, const Value& a, const Value& b) {
  bool use_float = a.is_float() || b.is_float() || op == BinaryOp::kDiv;
  if (!use_float) {
    int64_t x = a.as_int(), y = b.as_int(), r = 0;
    switch (op) {
      case BinaryOp::kAdd: {
        bool overflow = __builtin_add_overflow(x, y, &r);
        return int_result(overflow, r);
      }
      case BinaryOp::kSub: {
        bool overflow = __builtin_sub_overflow(x, y, &r);
        return int_result(overflow, r);
      }
      case BinaryOp::kMul: {
        bool overflow = __builtin_mul_overflow(x, y, &r);
        return int_result(overflow, r);
      }
      case BinaryOp::kFloorDiv:
      case BinaryOp::kMod: {
        if (y == 0) eval_fail("integer division or modulo by zero");
        if (x == INT64_MIN && y == -1) return int_result(true, 0);
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {
          q -= 1;
          m += y;
        }
        return Value::integer(op == BinaryOp::kFloorDiv ? q : m);
      }
      case BinaryOp::kPow: return int_pow(x, y);
      default: break;
    }
  }
  double x = a.as_float(), y = b.as_float();
  switch (op) {
    case BinaryOp::kAdd: return Value::number(x + y);
    case BinaryOp::kSub: return Value::number(x - y);
    case BinaryOp::kMul: return Value::number(x * y);
    case BinaryOp::kDiv:
      if (y == 0) eval_fail("division by zero");
      return Value::number(x / y);
    case BinaryOp::kFloorDiv:
    case BinaryOp::kMod: {
      // CPython's float divmod, so signs and rounding match Python exactly.
      if (y == 0) eval_fail("float divmod()");
      double mod = std::fmod(x, y);
      double div = (x - mod) / y;
      if (mod != 0) {
        if ((y < 0) != (mod < 0)) {
          mod += y;
          div -= 1.0;
        }
      } else {
        mod = std::copysign(0.0, y);
      }
      if (op == BinaryOp::kMod) return Value::number(mod);
      double floordiv = 0;
      if (div != 0) {
        floordiv = std::floor(div);
        if (div - floordiv > 0.5) floordiv += 1.0;
      } else {
        floordiv = std::copysign(0.0, x / y);
      }
      return Value::number(floordiv);
    }
    case BinaryOp::kPow:
      if (x == 0 && y < 0) eval_fail("0.0 cannot be raised to a negative power");
      return Value::number(std::pow(x, y));
  }
  return Value::none();
}

Value repeat(const Value& seq, int64_t times) {
  // Sized before anything is allocated: `'x' * 2**62` must fail at once, not run out of memory.
  size_t unit = seq.is_string() ? seq.as_string().size() : seq.as_list().items.size();
  size_t total = 0;
  if (times > 0 && __builtin_mul_overflow(unit, static_cast<uint64_t>(times), &total)) total = SIZE_MAX;
  if (seq.is_string()) check_string_size(total);
  else check_sequence_size(total);
  if (seq.is_string()) {
    std::string out;
    out.reserve(total);
    for (int64_t i = 0; i < times; ++i) out += seq.as_string();
    return Value::string(std::move(out), seq.is_safe());
  }
  ValueList items;
  items.reserve(total);
  for (int64_t i = 0; i < times; ++i) {
    items.insert(items.end(), seq.as_list().items.begin(), seq.as_list().items.end());
  }
  return seq.as_list().is_tuple ? Value::tuple(std::move(items)) : Value::list(std::move(items));
}

bool is_sequence_operand(const Value& v) {
  return v.is_string() || (v.is_list() && !v.as_list().is_iterator);
}

}  // namespace

Value binary_op(BinaryOp op, const Value& a, const Value& b) {
  // str % x is str.__mod__, which formats any x (an undefined one prints as "").
  if (op == BinaryOp::kMod && a.is_string()) return Value::string(percent_format(a.as_string(), b));
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_number() && b.is_number()) return numeric_op(op, a, b);
  if (op == BinaryOp::kAdd && a.is_string() && b.is_string()) {
    if (a.is_safe() || b.is_safe()) {  // markupsafe escapes the plain operand
      std::string lhs = a.is_safe() ? a.as_string() : html_escape(a.as_string());
      std::string rhs = b.is_safe() ? b.as_string() : html_escape(b.as_string());
      check_string_size(lhs.size(), rhs.size());
      return Value::string(lhs + rhs, true);
    }
    check_string_size(a.as_string().size(), b.as_string().size());
    return Value::string(a.as_string() + b.as_string());
  }
  if (op == BinaryOp::kAdd && a.is_list() && b.is_list() && !a.as_list().is_iterator &&
      !b.as_list().is_iterator && a.as_list().is_tuple == b.as_list().is_tuple) {
    check_sequence_size(a.as_list().items.size() + b.as_list().items.size());
    ValueList items = a.as_list().items;
    items.insert(items.end(), b.as_list().items.begin(), b.as_list().items.end());
    return a.as_list().is_tuple ? Value::tuple(std::move(items)) : Value::list(std::move(items));
  }
  if (op == BinaryOp::kMul) {
    if (is_sequence_operand(a) && (b.is_int() || b.is_bool())) return repeat(a, b.as_int());
    if (is_sequence_operand(b) && (a.is_int() || a.is_bool())) return repeat(b, a.as_int());
  }
  fail_operands(op, a, b);
}

Value negate(const Value& value) {
  if (value.is_undefined()) fail_undefined(value);
  if (value.is_float()) return Value::number(-value.as_float());
  if (value.is_number()) {
    if (value.as_int() == INT64_MIN) return int_result(true, 0);
    return Value::integer(-value.as_int());
  }
  eval_fail("bad operand type for unary -: '{}'", type_name(value));
}

Value unary_plus(const Value& value) {
  if (value.is_undefined()) fail_undefined(value);
  if (value.is_float()) return value;
  if (value.is_number()) return Value::integer(value.as_int());
  eval_fail("bad operand type for unary +: '{}'", type_name(value));
}

}  // namespace kestrel::chat
