#include "server/chunked_body.h"

#include <strings.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include <fmt/format.h>

#include "server/request_head.h"

namespace kestrel::server {
namespace {

constexpr size_t kMaxSizeLineBytes = 4096;  // with its CRLF
// Trailer lines are header lines: the head's limits (request_head.h).
constexpr size_t kMaxTrailerLineBytes = kMaxHeaderLineBytes;
constexpr size_t kMaxTrailerBytes = kMaxHeadBytes;
constexpr size_t kMaxSizeDigits = 16;  // 64 bits of hex
constexpr size_t kReadBytes = 16384;

// Bytes from `read`, consumed front to back, with CRLF lines and counted bytes taken off.
class Input {
 public:
  enum class Line { kOk, kTooLong, kNoCr, kEnd };

  explicit Input(const ReadBytes& read) : read_(read) {}

  // The next line without its CRLF, if it is at most `limit` bytes with it.
  Line line(size_t limit, std::string& out) {
    // `seen`: bytes after pos_ already searched (fill() may move pos_ to 0).
    for (size_t seen = 0;;) {
      const size_t nl = buf_.find('\n', pos_ + seen);
      if (nl != std::string::npos) {
        if (nl + 1 - pos_ > limit) return Line::kTooLong;
        if (nl == pos_ || buf_[nl - 1] != '\r') return Line::kNoCr;
        out.assign(buf_, pos_, nl - 1 - pos_);
        pos_ = nl + 1;
        return Line::kOk;
      }
      if (buf_.size() - pos_ >= limit) return Line::kTooLong;
      seen = buf_.size() - pos_;
      if (!fill()) return Line::kEnd;
    }
  }

  // Appends the next `n` bytes to `out`; false when the input ends first.
  bool take(uint64_t n, std::string& out) {
    while (n > 0) {
      if (pos_ == buf_.size() && !fill()) return false;
      const size_t k = static_cast<size_t>(std::min<uint64_t>(n, buf_.size() - pos_));
      out.append(buf_, pos_, k);
      pos_ += k;
      n -= k;
    }
    return true;
  }

  // The next two bytes are CRLF (taken off).
  bool crlf() {
    while (buf_.size() - pos_ < 2) {
      if (!fill()) return false;
    }
    if (buf_[pos_] != '\r' || buf_[pos_ + 1] != '\n') return false;
    pos_ += 2;
    return true;
  }

  std::string rest() const { return buf_.substr(pos_); }

 private:
  bool fill() {
    if (pos_ > kReadBytes) {  // keep the buffer near the size of what is still to be read
      buf_.erase(0, pos_);
      pos_ = 0;
    }
    char chunk[kReadBytes];
    const ssize_t n = read_(chunk, sizeof(chunk));
    if (n <= 0) return false;
    buf_.append(chunk, static_cast<size_t>(n));
    return true;
  }

  const ReadBytes& read_;
  std::string buf_;
  size_t pos_ = 0;
};

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The chunk size of a size line (hex digits, then nothing or an extension after optional
// blanks), or -1.
int64_t chunk_size(const std::string& line) {
  size_t i = 0;
  uint64_t size = 0;
  while (i < line.size() && hex_value(line[i]) >= 0) {
    if (i == kMaxSizeDigits) return -1;
    size = size * 16 + static_cast<uint64_t>(hex_value(line[i]));
    ++i;
  }
  if (i == 0 || size > uint64_t{INT64_MAX}) return -1;
  size_t j = i;
  while (j < line.size() && (line[j] == ' ' || line[j] == '\t')) ++j;
  if (j < line.size() && line[j] != ';') return -1;
  return static_cast<int64_t>(size);
}

ChunkedBody fail(int status, std::string why) {
  ChunkedBody b;
  b.status = status;
  b.error = std::move(why);
  return b;
}

const char* line_problem(Input::Line l) {
  switch (l) {
    case Input::Line::kTooLong:
      return "is too long";
    case Input::Line::kNoCr:
      return "does not end with CRLF";
    default:
      return "is missing (the body ended early)";
  }
}

struct HeaderLine {
  std::string_view line, name, value;  // the whole line (without its line ending) and its parts
};

// The head's header lines (after the request line, before the empty line).
std::vector<HeaderLine> header_lines(std::string_view head, std::string_view* request_line) {
  std::vector<HeaderLine> out;
  size_t pos = 0;
  bool first = true;
  while (pos < head.size()) {
    size_t end = head.find('\n', pos);
    if (end == std::string_view::npos) end = head.size();
    std::string_view line = head.substr(pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    pos = end + 1;
    if (first) {
      if (request_line != nullptr) *request_line = line;
      first = false;
      continue;
    }
    if (line.empty()) break;
    const size_t colon = line.find(':');
    HeaderLine h;
    h.line = line;
    h.name = line.substr(0, colon);
    if (colon != std::string_view::npos) {
      std::string_view v = line.substr(colon + 1);
      while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
      while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
      h.value = v;
    }
    out.push_back(h);
  }
  return out;
}

bool same(std::string_view a, std::string_view b) {
  return a.size() == b.size() && strncasecmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace

ChunkedBody read_chunked_body(const ReadBytes& read, size_t max_body_bytes) {
  Input in(read);
  ChunkedBody out;
  std::string line;
  for (;;) {
    if (const Input::Line l = in.line(kMaxSizeLineBytes, line); l != Input::Line::kOk) {
      return fail(400, fmt::format("The chunked body is malformed: a chunk-size line {}.",
                                   line_problem(l)));
    }
    const int64_t size = chunk_size(line);
    if (size < 0) {
      return fail(400, fmt::format("The chunked body is malformed: '{}' is not a chunk size.",
                                   line.substr(0, 40)));
    }
    if (size == 0) break;
    if (static_cast<uint64_t>(size) > max_body_bytes - out.body.size()) {
      return fail(413, fmt::format("The request body is larger than the server's limit of {} "
                                   "bytes.",
                                   max_body_bytes));
    }
    if (!in.take(static_cast<uint64_t>(size), out.body)) {
      return fail(400, "The chunked body ended inside a chunk.");
    }
    if (!in.crlf()) {
      return fail(400, "The chunked body is malformed: a chunk's data is not followed by CRLF.");
    }
  }
  // Trailer lines, dropped (no handler reads them), then the empty line.
  for (size_t trailers = 0;;) {
    if (const Input::Line l = in.line(kMaxTrailerLineBytes, line); l != Input::Line::kOk) {
      return fail(400, fmt::format("The chunked body is malformed: a trailer line {}.",
                                   line_problem(l)));
    }
    if (line.empty()) break;
    trailers += line.size() + 2;
    if (trailers > kMaxTrailerBytes) {
      return fail(400, fmt::format("The chunked body's trailers are over {} bytes.",
                                   kMaxTrailerBytes));
    }
  }
  out.rest = in.rest();
  return out;
}

bool is_plainly_chunked(std::string_view head) {
  std::string_view request_line;
  const std::vector<HeaderLine> headers = header_lines(head, &request_line);
  if (request_line.size() < 9 || request_line.substr(request_line.size() - 9) != " HTTP/1.1") {
    return false;
  }
  int codings = 0, lengths = 0;
  bool chunked = false;
  for (const HeaderLine& h : headers) {
    if (h.name.find_first_of(" \t") != std::string_view::npos) return false;
    if (same(h.name, "Transfer-Encoding")) {
      ++codings;
      chunked = same(h.value, "chunked");
    } else if (same(h.name, "Content-Length")) {
      ++lengths;
    }
  }
  return codings == 1 && lengths == 0 && chunked;
}

std::string with_content_length(std::string_view head, size_t n) {
  std::string_view request_line;
  const std::vector<HeaderLine> headers = header_lines(head, &request_line);
  std::string out(request_line);
  out += "\r\n";
  for (const HeaderLine& h : headers) {
    if (same(h.name, "Transfer-Encoding") || same(h.name, "Expect")) continue;
    out += h.line;
    out += "\r\n";
  }
  out += fmt::format("Content-Length: {}\r\n\r\n", n);
  return out;
}

bool expects_continue(std::string_view head) {
  for (const HeaderLine& h : header_lines(head, nullptr)) {
    if (same(h.name, "Expect") && same(h.value, "100-continue")) return true;
  }
  return false;
}

}  // namespace kestrel::server
