#include "core/json_parse.h"

#include <vector>

namespace kestrel {

nlohmann::ordered_json parse_untrusted_json(std::string_view text) {
  using Event = nlohmann::ordered_json::parse_event_t;
  std::vector<int64_t> keys;  // of each object open now, innermost last
  int64_t work = 0;           // sum over objects of (keys so far)^2
  const nlohmann::ordered_json::parser_callback_t bound = [&](int depth, Event event,
                                                              nlohmann::ordered_json&) {
    if (depth > kMaxJsonDepth) {
      throw JsonLimitError(fmt::format("is nested deeper than {} levels", kMaxJsonDepth));
    }
    if (event == Event::object_start) {
      keys.push_back(0);
    } else if (event == Event::object_end) {
      keys.pop_back();
    } else if (event == Event::key && !keys.empty()) {
      work += 2 * keys.back()++ + 1;
      if (work > kMaxJsonKeyWork) {
        throw JsonLimitError(fmt::format(
            "has objects of too many keys ({} in one, {} so far in all; at most 20000 in one "
            "object, fewer where several are large)",
            keys.back(), work));
      }
    }
    return true;
  };
  return nlohmann::ordered_json::parse(text, bound);
}

}  // namespace kestrel
