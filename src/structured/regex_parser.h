// Regular expressions (guided_regex, JSON schema "pattern") to a RegexNode.
//
// The whole output must match (as vLLM's guided_regex); a leading ^ and a trailing $ are
// accepted and mean nothing more. Supported: literals (UTF-8), ., [classes] with ranges and
// negation, escapes \d \w \s \D \W \S \n \r \t \f \v \0 \xHH \uHHHH \u{H..} and escaped
// punctuation, groups (...) and (?:...), named groups (?P<n>...) and (?<n>...) (names
// ignored), |, and the quantifiers * + ? {n} {n,} {n,m} (a lazy ? after one is accepted:
// laziness does not change which strings match). Anything else (backreferences,
// lookaround, \b, inline flags, possessive quantifiers) is an Error naming it.
//
// Classes take the meaning every common dialect agrees on, so that what the DFA produces
// matches under Python's re and ECMAScript alike: \d = [0-9], \w = [A-Za-z0-9_],
// \s = [ \t\n\r\f\v]; the negations \D \W \S and . exclude everything any dialect could
// count in the positive class (\D and \W: ASCII only; . excludes \n \r U+2028 U+2029).
#pragma once

#include <string_view>

#include "structured/regex_ast.h"

namespace kestrel::structured {

// Throws kestrel::Error ("regex: ... at offset N") for a syntax error or an unsupported
// feature. Counted repetitions above 1000 are refused (the DFA would be too large).
RegexNode parse_regex(std::string_view pattern);

}  // namespace kestrel::structured
