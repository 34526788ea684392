#include "structured/json_schema.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>

#include "core/error.h"
#include "structured/integer_range.h"
#include "structured/regex_parser.h"

namespace kestrel::structured {
namespace {

using json = nlohmann::ordered_json;

constexpr int kMaxCount = 1000;

RegexNode ws() { return optional(literal(" ")); }
RegexNode ws_comma() { return concat({ws(), literal(","), ws()}); }

// Code points a JSON string holds only escaped.
std::vector<CodeRange> json_escaped_code_points() { return {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}; }

RegexNode hex() { return class_of({{'0', '9'}, {'a', 'f'}, {'A', 'F'}}); }

RegexNode string_char() {
  RegexNode plain = class_of(complement_ranges(json_escaped_code_points()));
  // \uXXXX outside the surrogates D800-DFFF: one escape is always one code point.
  RegexNode u = alt({concat({class_of({{'0', '9'}, {'a', 'c'}, {'A', 'C'}, {'e', 'f'}, {'E', 'F'}}),
                             hex(), hex(), hex()}),
                     concat({class_of({{'d', 'd'}, {'D', 'D'}}), class_of({{'0', '7'}}), hex(), hex()})});
  RegexNode escape = concat({literal("\\"), alt({class_of({{'"', '"'}, {'\\', '\\'}, {'/', '/'},
                                                           {'b', 'b'}, {'f', 'f'}, {'n', 'n'},
                                                           {'r', 'r'}, {'t', 't'}}),
                                                 concat({literal("u"), std::move(u)})})});
  return alt({std::move(plain), std::move(escape)});
}

RegexNode string_of(int min, int max) {
  return concat({literal("\""), repeat(string_char(), min, max), literal("\"")});
}

RegexNode integer_node() {
  return concat({optional(literal("-")),
                 alt({literal("0"), concat({class_of({{'1', '9'}}), repeat(class_of({{'0', '9'}}), 0, 14)})})});
}

RegexNode number_node() {
  RegexNode digit = class_of({{'0', '9'}});
  return concat({integer_node(), optional(concat({literal("."), repeat(digit, 1, 15)})),
                 optional(concat({class_of({{'e', 'e'}, {'E', 'E'}}),
                                  optional(class_of({{'+', '+'}, {'-', '-'}})), repeat(digit, 1, 2)}))});
}

// Strings of a `format`: patterns whose every match the format's definition (RFC 3339,
// RFC 5321's dot-atom, RFC 4122, RFC 1123, RFC 3986) accepts, ajv-formats' "full" checks
// included. Subsets where the whole would not fit a pattern: dates stop at the 28th of
// February (no leap-year arithmetic), times have no leap second and always a zone,
// hostnames have at most three labels (so at most 191 characters of the 253 allowed),
// URIs are http(s)://host[:port] with unreserved characters in the path and query.
// Null for a format not listed.
const char* string_format_regex(const std::string& name) {
#define KS_DATE "[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))"
#define KS_TIME "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,6})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
#define KS_LABEL "[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?"
#define KS_OCTET "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
  static const std::map<std::string, const char*> formats = {
      {"date", KS_DATE},
      {"time", KS_TIME},
      {"date-time", KS_DATE "T" KS_TIME},
      {"uuid", "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"},
      {"ipv4", "(?:" KS_OCTET "\\.){3}" KS_OCTET},
      {"email", "[a-zA-Z0-9_+-]+(?:\\.[a-zA-Z0-9_+-]+)*@(?:" KS_LABEL "\\.)+" KS_LABEL},
      {"hostname", KS_LABEL "(?:\\." KS_LABEL "){0,2}"},
      {"uri", "https?://" KS_LABEL "(?:\\." KS_LABEL "){0,2}(?::[0-9]{1,5})?(?:/[a-zA-Z0-9._~-]*)*"
              "(?:\\?[a-zA-Z0-9._~=&-]*)?"},
  };
#undef KS_DATE
#undef KS_TIME
#undef KS_LABEL
#undef KS_OCTET
  auto it = formats.find(name);
  return it == formats.end() ? nullptr : it->second;
}

RegexNode scalar_node() {
  return alt({string_of(0, -1), number_node(), literal("true"), literal("false"), literal("null")});
}

// `{ key: value, ... }` with free keys.
RegexNode free_object(const RegexNode& value) {
  RegexNode pair = concat({string_of(0, -1), ws(), literal(":"), ws(), value});
  return concat({literal("{"), ws(), separated(std::move(pair), ws_comma(), 0, -1), ws(),
                 literal("}")});
}

RegexNode array_of(const RegexNode& item, int min, int max) {
  if (max == 0) return concat({literal("["), ws(), literal("]")});
  return concat({literal("["), ws(), separated(item, ws_comma(), min, max), ws(), literal("]")});
}

// Any JSON value with containers nested at most `depth` deep.
RegexNode any_value(int depth) {
  if (depth <= 0) return scalar_node();
  RegexNode inner = any_value(depth - 1);
  return alt({scalar_node(), free_object(inner), array_of(inner, 0, -1)});
}

const std::set<std::string>& annotations() {
  static const std::set<std::string> k = {"title",   "description", "default",  "examples",
                                          "$schema", "$id",         "$comment", "$defs",
                                          "definitions", "deprecated", "readOnly", "writeOnly"};
  return k;
}
const std::set<std::string>& supported() {
  static const std::set<std::string> k = {
      "type",     "enum",     "const",     "properties", "required",  "additionalProperties",
      "items",    "minItems", "maxItems",  "minLength",  "maxLength", "pattern",
      "anyOf",    "allOf",    "$ref",      "minimum",    "maximum",   "exclusiveMinimum",
      "exclusiveMaximum", "format"};
  return k;
}

class SchemaCompiler {
 public:
  explicit SchemaCompiler(const json& root) : root_(root) {}

  // Every schema's pattern, its size checked as it is built: a schema whose pattern grows
  // faster than its text ($refs used many times, objects of many optional properties) fails
  // with this error instead of exhausting the server's memory.
  RegexNode node(const json& s, const std::string& path) {
    RegexNode r = build(s, path);
    check_size(node_count(r), path);
    return r;
  }

  static void check_size(size_t nodes, const std::string& path) {
    KS_CHECK(nodes <= kMaxPatternNodes,
             "the JSON schema at {} makes a pattern of more than {} parts; simplify it (fewer "
             "optional properties in one object, fewer uses of the same $ref)",
             path.empty() ? "/" : path, kMaxPatternNodes);
  }

  RegexNode build(const json& s, const std::string& path) {
    const std::string at = path.empty() ? "/" : path;
    if (s.is_boolean()) {
      KS_CHECK(s.get<bool>(), "JSON schema false at {} matches nothing", at);
      return any_value(kMaxFreeDepth);
    }
    KS_CHECK(s.is_object(), "JSON schema at {} must be an object or a boolean", at);
    std::vector<std::string> keys;  // the constraining keywords present
    for (const auto& [key, value] : s.items()) {
      if (annotations().contains(key)) continue;
      KS_CHECK(supported().contains(key), "unsupported JSON schema keyword '{}' at {}", key, at);
      keys.push_back(key);
    }
    auto alone = [&](const char* key) {
      KS_CHECK(keys.size() == 1, "JSON schema keyword '{}' together with '{}' at {} is not supported",
               key, keys[0] == key ? keys[1] : keys[0], at);
    };
    if (s.contains("$ref")) {
      alone("$ref");
      return ref(s["$ref"], at);
    }
    if (s.contains("anyOf")) {
      alone("anyOf");
      const json& options = s["anyOf"];
      KS_CHECK(options.is_array() && !options.empty(), "'anyOf' at {} must be a non-empty array", at);
      std::vector<RegexNode> out;
      for (size_t i = 0; i < options.size(); ++i) {
        out.push_back(node(options[i], path + "/anyOf/" + std::to_string(i)));
      }
      return alt(std::move(out));
    }
    if (s.contains("allOf")) {
      alone("allOf");
      const json& all = s["allOf"];
      KS_CHECK(all.is_array() && all.size() == 1,
               "'allOf' at {} is supported only with exactly one schema", at);
      return node(all[0], path + "/allOf/0");
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      const json& t = s["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else {
        KS_CHECK(t.is_array() && !t.empty(), "'type' at {} must be a string or a non-empty array", at);
        for (const json& x : t) {
          KS_CHECK(x.is_string(), "'type' at {} must list strings", at);
          types.push_back(x.get<std::string>());
        }
      }
    }
    for (const char* key : {"enum", "const"}) {
      if (!s.contains(key)) continue;
      for (const std::string& k : keys) {
        KS_CHECK(k == key || k == "type",
                 "JSON schema keyword '{}' together with '{}' at {} is not supported", key, k, at);
      }
      const json values = std::string(key) == "const" ? json::array({s[key]}) : s[key];
      KS_CHECK(values.is_array() && !values.empty(), "'enum' at {} must be a non-empty array", at);
      std::vector<RegexNode> out;
      size_t bytes = 0;
      for (const json& v : values) {
        if (!types.empty() && !has_type(v, types)) continue;
        const std::string text = v.dump();
        bytes += text.size();
        KS_CHECK(bytes <= kMaxPatternTextBytes,
                 "the values of '{}' at {} hold more than the {} bytes a pattern may be made of",
                 key, at, kMaxPatternTextBytes);
        out.push_back(literal(text));
      }
      KS_CHECK(!out.empty(), "no value of '{}' at {} has the schema's type", key, at);
      return alt(std::move(out));
    }
    if (types.empty()) {
      for (const std::string& k : keys) {
        if (k == "properties" || k == "required" || k == "additionalProperties") types = {"object"};
        if (k == "items" || k == "minItems" || k == "maxItems") types = {"array"};
        if (k == "minLength" || k == "maxLength" || k == "pattern" || k == "format") types = {"string"};
      }
      if (types.empty()) return any_value(kMaxFreeDepth);
    }
    std::vector<RegexNode> out;
    for (const std::string& t : types) {
      if (t == "string") {
        out.push_back(string_node(s, at));
      } else if (t == "integer") {
        out.push_back(integer_bounds(s, at));
      } else if (t == "number" && numeric_format(s, at) == NumericFormat::kInteger) {
        out.push_back(integer_bounds(s, at));  // int32/int64 numbers are whole
      } else if (t == "number") {
        out.push_back(number_bounds(s, at));
      } else if (t == "boolean") {
        out.push_back(alt({literal("true"), literal("false")}));
      } else if (t == "null") {
        out.push_back(literal("null"));
      } else if (t == "object") {
        out.push_back(object_node(s, path));
      } else if (t == "array") {
        out.push_back(array_node(s, path));
      } else {
        throw_error("unknown JSON schema type '{}' at {}", t, at);
      }
    }
    return alt(std::move(out));
  }

 private:
  static bool has_type(const json& v, const std::vector<std::string>& types) {
    for (const std::string& t : types) {
      if ((t == "string" && v.is_string()) || (t == "integer" && v.is_number_integer()) ||
          (t == "number" && v.is_number()) || (t == "boolean" && v.is_boolean()) ||
          (t == "null" && v.is_null()) || (t == "object" && v.is_object()) ||
          (t == "array" && v.is_array())) {
        return true;
      }
    }
    return false;
  }

  static int count(const json& s, const char* key, int fallback, const std::string& at) {
    if (!s.contains(key)) return fallback;
    const json& v = s[key];
    KS_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= kMaxCount,
             "'{}' at {} must be an integer in [0, {}]", key, at, kMaxCount);
    return v.get<int>();
  }

  // The tightest of minimum/exclusiveMinimum and of maximum/exclusiveMaximum, each clamped
  // to [-limit, limit] (the unbounded side stays there).
  struct Bounds {
    double lo, hi;
    bool lo_open = false, hi_open = false, given = false;
    // The integers within them: [int_lo(), int_hi()].
    double int_lo() const { return lo_open ? std::floor(lo) + 1 : std::ceil(lo); }
    double int_hi() const { return hi_open ? std::ceil(hi) - 1 : std::floor(hi); }
  };
  static Bounds read_bounds(const json& s, const std::string& at, double limit) {
    Bounds b{-limit, limit};
    auto bound = [&](const char* key, double& v, bool& open, bool exclusive, bool lower) {
      if (!s.contains(key)) return;
      KS_CHECK(s[key].is_number(), "'{}' at {} must be a number", key, at);
      const double x = std::clamp(s[key].get<double>(), -limit, limit);
      b.given = true;
      if ((lower && (x > v || (x == v && exclusive))) || (!lower && (x < v || (x == v && exclusive)))) {
        v = x;
        open = exclusive;
      }
    };
    bound("minimum", b.lo, b.lo_open, false, true);
    bound("exclusiveMinimum", b.lo, b.lo_open, true, true);
    bound("maximum", b.hi, b.hi_open, false, false);
    bound("exclusiveMaximum", b.hi, b.hi_open, true, false);
    return b;
  }

  // OpenAPI's numeric formats, as ajv-formats checks them: int32 and int64 are whole
  // numbers (int32 within 32 bits; every generated integer, 15 digits at most, fits int64),
  // float and double any number. Others are refused: their meaning is not known here.
  enum class NumericFormat { kNone, kInteger, kAny };
  static NumericFormat numeric_format(const json& s, const std::string& at) {
    if (!s.contains("format")) return NumericFormat::kNone;
    const json& f = s["format"];
    KS_CHECK(f.is_string(), "'format' at {} must be a string", at);
    if (f == "int32" || f == "int64") return NumericFormat::kInteger;
    KS_CHECK(f == "float" || f == "double",
             "JSON schema format '{}' at {} is not supported on numbers (supported: int32, int64, "
             "float, double)", f.get<std::string>(), at);
    return NumericFormat::kAny;
  }

  // An integer within minimum/maximum/exclusiveMinimum/exclusiveMaximum (any of them).
  static RegexNode integer_bounds(const json& s, const std::string& at) {
    const Bounds b = read_bounds(s, at, 1e16);  // beyond any generated integer
    double lo = b.int_lo(), hi = b.int_hi();
    const bool int32 = numeric_format(s, at) == NumericFormat::kInteger && s["format"] == "int32";
    if (int32) {
      lo = std::max(lo, -2147483648.0);
      hi = std::min(hi, 2147483647.0);
    }
    if (!b.given && !int32) return integer_node();
    try {
      return integer_range(static_cast<int64_t>(lo), static_cast<int64_t>(hi));
    } catch (const Error& e) {
      throw_error("integer bounds at {}: {}", at, e.what());
    }
  }

  // Numbers within minimum/maximum (inclusive or exclusive). Written without exponent:
  // the integers in range, and k.f / -k.f where f ends in a non-zero digit, so the value
  // lies strictly between k and k + 1 (or -(k + 1) and -k), with k taken where that whole
  // interval is in range. Whole bounds lose nothing; between two fractional bounds the
  // partial unit intervals at the ends are left out (0.25 to 0.75 has no such interval:
  // refused, saying so).
  static RegexNode number_bounds(const json& s, const std::string& at) {
    constexpr double kMax = static_cast<double>(kMaxGeneratedInteger);
    const Bounds b = read_bounds(s, at, kMax + 1);
    if (!b.given) return number_node();
    const RegexNode fraction = concat({literal("."), repeat(class_of({{'0', '9'}}), 0, 14),
                                       class_of({{'1', '9'}})});
    std::vector<RegexNode> parts;
    auto range = [&](double a, double b, std::vector<RegexNode> before, bool fractional) {
      const double first = std::max(a, 0.0), last = std::min(b, kMax);
      if (first > last) return;
      before.push_back(integer_range(static_cast<int64_t>(first), static_cast<int64_t>(last)));
      if (fractional) before.push_back(fraction);
      parts.push_back(concat(std::move(before)));
    };
    if (b.int_lo() <= b.int_hi()) {
      parts.push_back(integer_range(static_cast<int64_t>(std::max(b.int_lo(), -kMax)),
                                    static_cast<int64_t>(std::min(b.int_hi(), kMax))));
    }
    range(std::ceil(b.lo), std::floor(b.hi) - 1, {}, true);                // k.f in (k, k + 1)
    range(std::ceil(-b.hi), std::floor(-b.lo) - 1, {literal("-")}, true);  // -k.f in (-k - 1, -k)
    KS_CHECK(!parts.empty(),
             "no number between the bounds at {} can be generated (a whole number, or a "
             "whole unit interval, must lie within them)", at);
    return alt(std::move(parts));
  }

  RegexNode ref(const json& target, const std::string& at) {
    KS_CHECK(target.is_string(), "'$ref' at {} must be a string", at);
    const std::string r = target.get<std::string>();
    for (const std::string& open : refs_) {
      KS_CHECK(open != r, "recursive '$ref' '{}' at {} is not supported", r, at);
    }
    const json* s = nullptr;
    if (r == "#") {
      s = &root_;
    } else {
      // Every definition's $ref, once: an ordered_json object looks a key up by a scan, and
      // 100,000 definitions each used once took 7.5 s to refuse.
      if (definitions_.empty()) {
        for (const char* section : {"$defs", "definitions"}) {
          if (!root_.contains(section) || !root_[section].is_object()) continue;
          for (const auto& [name, schema] : root_[section].items()) {
            definitions_.emplace(fmt::format("#/{}/{}", section, name), &schema);
          }
        }
      }
      if (auto it = definitions_.find(r); it != definitions_.end()) s = it->second;
    }
    KS_CHECK(s != nullptr, "'$ref' '{}' at {} does not name a schema in #/$defs or #/definitions", r, at);
    // A target's pattern does not depend on where it is used: made once.
    if (auto it = done_refs_.find(r); it != done_refs_.end()) return it->second;
    refs_.push_back(r);
    RegexNode out = node(*s, r.substr(1));
    refs_.pop_back();
    done_refs_.emplace(r, out);
    return out;
  }

  RegexNode string_node(const json& s, const std::string& at) {
    if (s.contains("format")) {
      KS_CHECK(s["format"].is_string(), "'format' at {} must be a string", at);
      const std::string name = s["format"].get<std::string>();
      for (const char* k : {"pattern", "minLength", "maxLength"}) {
        KS_CHECK(!s.contains(k), "JSON schema keyword 'format' together with '{}' at {} is not supported", k, at);
      }
      const char* re = string_format_regex(name);
      KS_CHECK(re != nullptr,
               "JSON schema format '{}' at {} is not supported (supported: date-time, date, time, "
               "email, uuid, ipv4, hostname, uri)", name, at);
      return concat({literal("\""), parse_regex(re), literal("\"")});
    }
    if (s.contains("pattern")) {
      KS_CHECK(!s.contains("minLength") && !s.contains("maxLength"),
               "JSON schema keyword 'pattern' together with minLength/maxLength at {} is not supported", at);
      KS_CHECK(s["pattern"].is_string(), "'pattern' at {} must be a string", at);
      RegexNode p;
      try {
        p = parse_regex(s["pattern"].get<std::string>());
      } catch (const Error& e) {
        throw_error("'pattern' at {}: {}", at, e.what());
      }
      return concat({literal("\""), without_code_points(p, json_escaped_code_points()), literal("\"")});
    }
    const int min = count(s, "minLength", 0, at);
    const int max = count(s, "maxLength", -1, at);
    KS_CHECK(max < 0 || max >= min, "maxLength < minLength at {}", at);
    return string_of(min, max);
  }

  RegexNode array_node(const json& s, const std::string& path) {
    const std::string at = path.empty() ? "/" : path;
    const int min = count(s, "minItems", 0, at);
    const int max = count(s, "maxItems", -1, at);
    KS_CHECK(max < 0 || max >= min, "maxItems < minItems at {}", at);
    RegexNode item = s.contains("items") ? node(s["items"], path + "/items") : any_value(kMaxFreeDepth - 1);
    return array_of(item, min, max);
  }

  RegexNode object_node(const json& s, const std::string& path) {
    const std::string at = path.empty() ? "/" : path;
    const json empty = json::object();
    const json& props = s.contains("properties") ? s["properties"] : empty;
    KS_CHECK(props.is_object(), "'properties' at {} must be an object", at);
    std::set<std::string> required;
    if (s.contains("required")) {
      KS_CHECK(s["required"].is_array(), "'required' at {} must be an array of names", at);
      // The names once, in a set: an ordered_json object looks a key up by a scan, which
      // made 300,000 required names a 150 s request.
      std::set<std::string> names;
      for (const auto& [name, schema] : props.items()) names.insert(name);
      for (const json& r : s["required"]) {
        KS_CHECK(r.is_string(), "'required' at {} must be an array of names", at);
        KS_CHECK(names.contains(r.get<std::string>()),
                 "required property '{}' at {} must be listed in 'properties'", r.get<std::string>(), at);
        required.insert(r.get<std::string>());
      }
    }
    if (props.empty()) {
      const json* extra = s.contains("additionalProperties") ? &s["additionalProperties"] : nullptr;
      if (extra != nullptr && extra->is_boolean() && !extra->get<bool>()) {
        return concat({literal("{"), ws(), literal("}")});
      }
      if (extra != nullptr && extra->is_object()) {
        return free_object(node(*extra, path + "/additionalProperties"));
      }
      return free_object(any_value(kMaxFreeDepth - 1));
    }
    if (s.contains("additionalProperties")) {
      const json& extra = s["additionalProperties"];
      KS_CHECK(extra.is_boolean() || extra.is_object(),
               "'additionalProperties' at {} must be a boolean or a schema", at);
    }
    std::vector<RegexNode> members;
    std::vector<bool> is_required;
    size_t nodes = 0;  // of the members so far: checked as they are made, not after
    for (const auto& [name, schema] : props.items()) {
      members.push_back(concat({literal(json(name).dump()), ws(), literal(":"), ws(),
                                node(schema, path + "/properties/" + name)}));
      is_required.push_back(required.contains(name));
      nodes += node_count(members.back());
      check_size(nodes, path);
    }
    const size_t n = members.size();
    size_t first = n;
    for (size_t i = 0; i < n && first == n; ++i) {
      if (is_required[i]) first = i;
    }
    RegexNode body;
    if (first < n) {
      // Optional members before the first required one carry their comma after them, the
      // others before them.
      std::vector<RegexNode> parts;
      for (size_t i = 0; i < first; ++i) parts.push_back(optional(concat({members[i], ws_comma()})));
      parts.push_back(members[first]);
      for (size_t i = first + 1; i < n; ++i) {
        RegexNode m = concat({ws_comma(), members[i]});
        parts.push_back(is_required[i] ? std::move(m) : optional(std::move(m)));
      }
      body = concat(std::move(parts));
    } else {
      // Member j is copied once for each member before it: the tree grows with n^2. Its size
      // is known before it is made.
      // The nodes optional(concat(ws_comma, member)) adds around a member.
      const size_t wrap = node_count(optional(concat({ws_comma(), empty_node()}))) - 1;
      size_t total = 0, after = 0;  // `after`: the optional tails of members j + 1 .. n - 1
      for (size_t j = n; j-- > 0;) {
        const size_t m = node_count(members[j]);
        total += m + 1 + after;
        after += m + wrap;
        if (total > kMaxPatternNodes) break;
      }
      check_size(total, path);
      std::vector<RegexNode> options;  // by the first member present
      for (size_t j = 0; j < n; ++j) {
        std::vector<RegexNode> seq{members[j]};
        for (size_t i = j + 1; i < n; ++i) seq.push_back(optional(concat({ws_comma(), members[i]})));
        options.push_back(concat(std::move(seq)));
      }
      body = optional(alt(std::move(options)));
    }
    return concat({literal("{"), ws(), std::move(body), ws(), literal("}")});
  }

  const json& root_;
  std::vector<std::string> refs_;  // $refs being expanded
  std::map<std::string, RegexNode> done_refs_;  // $refs expanded, by target
  std::unordered_map<std::string, const json*> definitions_;  // "#/$defs/name": its schema
};

}  // namespace

RegexNode json_schema_pattern(const nlohmann::ordered_json& schema) {
  return SchemaCompiler(schema).node(schema, "");
}

RegexNode json_object_pattern() { return free_object(any_value(kMaxFreeDepth - 1)); }

}  // namespace kestrel::structured
