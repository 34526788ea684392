// continue_final_message against transformers' rule, worked by hand on a template that
// keeps the content as it is and one that strips it.
#include <gtest/gtest.h>

#include "chat/chat_template.h"
#include "core/error.h"

namespace kestrel {
namespace {

using ojson = nlohmann::ordered_json;

const char* kKeeps = "{% for m in messages %}<{{ m.role }}>{{ m.content }}</s>{% endfor %}";
const char* kStrips = "{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}</s>{% endfor %}";

std::string continued(const char* tmpl, const ojson& messages) {
  return continue_final_message(apply_chat_template(tmpl, messages, false), messages);
}

ojson chat(const ojson& last_content) {
  return ojson::array({{{"role", "user"}, {"content", "Hi"}},
                       {{"role", "assistant"}, {"content", last_content}}});
}

TEST(ContinueFinalMessage, CutsAfterTheLastMessage) {
  EXPECT_EQ(continued(kKeeps, chat("The answer is")), "<user>Hi</s><assistant>The answer is");
  // Trailing whitespace the template kept stays (the model continues after the space).
  EXPECT_EQ(continued(kKeeps, chat("The answer is ")), "<user>Hi</s><assistant>The answer is ");
  EXPECT_EQ(continued(kKeeps, chat("Two\nlines\n")), "<user>Hi</s><assistant>Two\nlines\n");
  // Trimmed by the template: the prompt ends at the stripped text.
  EXPECT_EQ(continued(kStrips, chat("The answer is ")), "<user>Hi</s><assistant>The answer is");
  // Leading whitespace: the rendered text no longer starts like the message, so the cut
  // follows the stripped text even where the template kept it.
  EXPECT_EQ(continued(kKeeps, chat(" x ")), "<user>Hi</s><assistant> x");
  // Python's str.strip() strips Unicode whitespace (U+3000 here) as well.
  EXPECT_EQ(continued(kStrips, chat("\xe3\x80\x80ok\xe3\x80\x80")), "<user>Hi</s><assistant>ok");
  // The last occurrence: the same text earlier in the chat does not count.
  EXPECT_EQ(continued(kKeeps, ojson::array({{{"role", "user"}, {"content", "Hi"}},
                                            {{"role", "assistant"}, {"content", "Hi"}}})),
            "<user>Hi</s><assistant>Hi");
  // A list of parts: the last text part is the one continued.
  const ojson parts = ojson::array({{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}});
  EXPECT_EQ(continue_final_message("<assistant>a\nb</s>", chat(parts)), "<assistant>a\nb");
}

TEST(ContinueFinalMessage, ErrorsNameTheProblem) {
  auto fails = [](const std::string& rendered, const ojson& messages, const char* words) {
    try {
      continue_final_message(rendered, messages);
      ADD_FAILURE() << "no error for " << messages.dump();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  fails("<assistant>something else</s>", chat("The answer"), "does not appear");
  fails("<assistant></s>", chat(nullptr), "no text");
  fails("<assistant></s>", chat(ojson::array({{{"type", "image_url"}}})), "no text");
  fails("", ojson::array(), "final message");
}

}  // namespace
}  // namespace kestrel
