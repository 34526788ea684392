// json.dumps with Python's exact output, as Hugging Face's `tojson` filter calls it.
#include <algorithm>
#include <cmath>

#include "chat/limits.h"
#include "chat/py_format.h"
#include "chat/utf8.h"
#include "chat/value_ops.h"

namespace kestrel::chat {

namespace {

void json_escape(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  for (size_t pos = 0; pos < s.size();) {
    size_t start = pos;
    char32_t cp = utf8_next(s, pos);
    switch (cp) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (cp < 0x20 || (ensure_ascii && cp >= 0x7F)) {
      if (cp >= 0x10000) {
        char32_t v = cp - 0x10000;
        out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      } else {
        out += fmt::format("\\u{:04x}", static_cast<unsigned>(cp));
      }
    } else {
      out.append(s.substr(start, pos - start));
    }
  }
  out += '"';
}

std::string json_float(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return float_repr(v);
}

std::string json_key(const Value& key) {
  switch (key.kind()) {
    case Value::Kind::kString: return key.as_string();
    case Value::Kind::kBool: return key.as_bool() ? "true" : "false";
    case Value::Kind::kInt: return std::to_string(key.as_int());
    case Value::Kind::kFloat: return json_float(key.as_float());
    case Value::Kind::kNone: return "null";
    default: eval_fail("keys must be str, int, float, bool or None, not {}", type_name(key));
  }
}

class JsonWriter {
 public:
  explicit JsonWriter(const JsonDumpOptions& options) : options_(options) {
    item_separator_ = options.item_separator.value_or(options.indent ? "," : ", ");
  }

  void write(std::string& out, const Value& value, int level) const {
    switch (value.kind()) {
      case Value::Kind::kNone: out += "null"; return;
      case Value::Kind::kBool: out += value.as_bool() ? "true" : "false"; return;
      case Value::Kind::kInt: out += std::to_string(value.as_int()); return;
      case Value::Kind::kFloat: out += json_float(value.as_float()); return;
      case Value::Kind::kString: json_escape(out, value.as_string(), options_.ensure_ascii); return;
      case Value::Kind::kList:
        if (!value.as_list().is_iterator) {
          write_list(out, value.as_list().items, level);
          return;
        }
        break;
      case Value::Kind::kDict: write_dict(out, value.as_dict(), level); return;
      default: break;
    }
    eval_fail("Object of type {} is not JSON serializable", type_name(value));
  }

 private:
  // Writes the separator before an item: newline and indent in indented mode.
  void open_item(std::string& out, bool first, int level) const {
    if (!first) out += item_separator_;
    if (options_.indent) {
      check_string_size(out.size(), 1 + static_cast<size_t>(level) * options_.indent->size());
      out += '\n';
      for (int i = 0; i < level; ++i) out += *options_.indent;
    }
  }

  void close(std::string& out, int level, char bracket) const {
    if (options_.indent) {
      check_string_size(out.size(), 1 + static_cast<size_t>(level) * options_.indent->size());
      out += '\n';
      for (int i = 0; i < level; ++i) out += *options_.indent;
    }
    out += bracket;
  }

  void write_list(std::string& out, const ValueList& items, int level) const {
    if (items.empty()) {
      out += "[]";
      return;
    }
    out += '[';
    for (size_t i = 0; i < items.size(); ++i) {
      open_item(out, i == 0, level + 1);
      write(out, items[i], level + 1);
    }
    close(out, level, ']');
  }

  void write_dict(std::string& out, const DictData& dict, int level) const {
    if (dict.entries.empty()) {
      out += "{}";
      return;
    }
    std::vector<const std::pair<Value, Value>*> entries;
    for (const auto& entry : dict.entries) entries.push_back(&entry);
    if (options_.sort_keys) {
      std::stable_sort(entries.begin(), entries.end(),
                       [](const auto* a, const auto* b) { return values_less(a->first, b->first); });
    }
    out += '{';
    for (size_t i = 0; i < entries.size(); ++i) {
      open_item(out, i == 0, level + 1);
      json_escape(out, json_key(entries[i]->first), options_.ensure_ascii);
      out += options_.key_separator;
      write(out, entries[i]->second, level + 1);
    }
    close(out, level, '}');
  }

  const JsonDumpOptions& options_;
  std::string item_separator_;
};

}  // namespace

std::string json_dumps(const Value& value, const JsonDumpOptions& options) {
  std::string out;
  JsonWriter(options).write(out, value, 0);
  return out;
}

}  // namespace kestrel::chat
