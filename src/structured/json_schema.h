// JSON schemas (response_format json_schema, guided_json) and "any JSON object"
// (json_object) as a RegexNode of the JSON text to generate.
//
// What is generated is compact JSON: at most one space where JSON allows whitespace,
// object properties in the schema's order (required ones always, optional ones may be
// left out, no others even when additionalProperties allows them), numbers of at most 15
// integer and 15 fraction digits with an exponent of at most two digits (so that every
// JSON parser reads them as finite doubles), and strings without \u escapes of surrogates
// (so that lengths count the same in code points and UTF-16 units). Every output is valid
// under the schema; not every valid document can be produced.
//
// Supported keywords: type (one or a list), enum, const, properties, required,
// additionalProperties (false, true or a schema: used for the values of objects that
// declare no properties), items, minItems, maxItems, minLength, maxLength, pattern (not
// together with minLength/maxLength), minimum, maximum, exclusiveMinimum and
// exclusiveMaximum on integers (not on numbers), anyOf, allOf of one schema, $ref to "#",
// "#/$defs/.." or "#/definitions/.." (not recursive), and the annotations title,
// description, default, examples, $schema, $id, $comment, $defs, definitions, deprecated,
// readOnly, writeOnly. Any other keyword (format, oneOf, uniqueItems, multipleOf, ...) is
// an Error naming it and where it is ("unsupported JSON schema keyword 'format' at
// /properties/day"): the output would otherwise not be guaranteed to validate.
//
// Values of free form (json_object, a schema of true or {}, an object without properties)
// nest at most kMaxFreeDepth containers deep: nesting is not regular, and the depth keeps
// the automaton small.
#pragma once

#include <nlohmann/json.hpp>

#include "structured/regex_ast.h"

namespace kestrel::structured {

constexpr int kMaxFreeDepth = 4;

// Throws kestrel::Error naming the keyword and its location for what is unsupported or
// contradictory (a schema that matches nothing, required names missing from properties).
RegexNode json_schema_pattern(const nlohmann::ordered_json& schema);
// Any JSON object (response_format {"type": "json_object"}).
RegexNode json_object_pattern();

}  // namespace kestrel::structured
