// Python semantics for template values: truthiness, str()/repr(), comparison, arithmetic,
// iteration, len(), `in`, and jinja2's sandboxed attribute/item lookup.
//
// Failures (a TypeError in Python, an undefined value used where a real one is needed) throw
// EvalError; the renderer turns it into a TemplateError naming the template location.
#pragma once

#include <fmt/format.h>

#include <optional>
#include <string>
#include <string_view>

#include "chat/value.h"

namespace kestrel::chat {

struct EvalError {
  std::string message;
  bool raised_by_template = false;  // raise_exception() from the template itself
};

template <typename... Args>
[[noreturn]] void eval_fail(fmt::format_string<Args...> format, Args&&... args) {
  throw EvalError{fmt::format(format, std::forward<Args>(args)...)};
}

// Throws the error an undefined value carries (jinja2's UndefinedError).
[[noreturn]] void fail_undefined(const Value& value);

// Python's type name: "str", "int", "dict", "list", "tuple", "NoneType", "generator", ...
std::string type_name(const Value& value);

bool truthy(const Value& value);
// str(value); undefined prints as "".
std::string py_str(const Value& value);
std::string py_repr(const Value& value);
std::string py_repr_string(std::string_view s);
std::string float_repr(double value);

// Python `==` (1 == 1.0 == True; lists elementwise; dicts ignore order).
bool values_equal(const Value& a, const Value& b);
// Python `<`; throws EvalError when the types cannot be ordered.
bool values_less(const Value& a, const Value& b);

// Python iteration: list items, dict keys, string code points; undefined iterates empty.
ValueList iterate(const Value& value);
// len(); undefined has length 0.
int64_t length(const Value& value);
// `item in container`.
bool contains(const Value& container, const Value& item);

enum class BinaryOp { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow };
Value binary_op(BinaryOp op, const Value& a, const Value& b);
Value negate(const Value& value);
Value unary_plus(const Value& value);

// jinja2's sandboxed `obj.name`: Python attribute (methods) first, then item.
Value get_attr(const Value& obj, std::string_view name);
// jinja2's sandboxed `obj[key]`: item first, then attribute for string keys.
Value get_item(const Value& obj, const Value& key);
Value slice_value(const Value& obj, std::optional<int64_t> start, std::optional<int64_t> stop,
                  std::optional<int64_t> step);

}  // namespace kestrel::chat
