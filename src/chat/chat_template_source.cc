// chat_template_source (chat_template.h): what a --chat-template argument names.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>

#include "chat/chat_template.h"
#include "core/error.h"

namespace kestrel {

std::string chat_template_source(const std::string& arg) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(arg, ec)) {
    std::ifstream in(arg, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), {});
    KS_CHECK(in.good() || in.eof(), "chat template '{}': cannot read the file", arg);
    return text;
  }
  KS_CHECK(arg.find("{{") != std::string::npos || arg.find("{%") != std::string::npos,
           "chat template '{}': no such file, and not a Jinja template either", arg);
  return arg;
}

}  // namespace kestrel
