// chunked_body.h against RFC 9112 section 7.1's grammar: bodies framed as the RFC says are
// read whole (however the bytes arrive), anything else is refused with the reason, and the
// request head is rewritten with the body's Content-Length.
#include "server/chunked_body.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>

namespace kestrel::server {
namespace {

// Reads `input` `step` bytes at a time (the way a slow client's bytes arrive); `unread`: what
// the reader left in the input.
ChunkedBody read_all(const std::string& input, size_t max = 1 << 20, size_t step = 1 << 20,
                     std::string* unread = nullptr) {
  size_t pos = 0;
  ChunkedBody b = read_chunked_body(
      [&](char* ptr, size_t size) -> ssize_t {
        const size_t n = std::min({size, step, input.size() - pos});
        std::memcpy(ptr, input.data() + pos, n);
        pos += n;
        return static_cast<ssize_t>(n);
      },
      max);
  if (unread != nullptr) *unread = input.substr(pos);
  return b;
}

TEST(ChunkedBody, ReadsWellFramedBodiesWhateverTheReadSizes) {
  const std::string framed =
      "5\r\nhello\r\n"
      "1A;name=value\r\n" + std::string(26, 'x') + "\r\n"
      "0007 ;ext\r\n, world\r\n"
      "0\r\nTrailer: dropped\r\n\r\n"
      "GET /next HTTP/1.1\r\n";
  for (size_t step : {size_t{1}, size_t{3}, size_t{1} << 20}) {
    SCOPED_TRACE("step " + std::to_string(step));
    std::string unread;
    const ChunkedBody b = read_all(framed, 1 << 20, step, &unread);
    EXPECT_EQ(b.status, 0) << b.error;
    EXPECT_EQ(b.body, "hello" + std::string(26, 'x') + ", world");
    // The next request's bytes: those read past the body, then those not read at all.
    EXPECT_EQ(b.rest + unread, "GET /next HTTP/1.1\r\n");
  }
  // Chunks of 20,000 bytes read 7,000 at a time: a size line starts after the reader has
  // dropped what it consumed (its search offset must move with the buffer).
  std::string big;
  for (int i = 0; i < 5; ++i) big += "4E20\r\n" + std::string(20000, char('a' + i)) + "\r\n";
  big += "0\r\n\r\n";
  const ChunkedBody b = read_all(big, 1 << 20, 7000);
  EXPECT_EQ(b.status, 0) << b.error;
  EXPECT_EQ(b.body.size(), 100000u);
  const ChunkedBody empty = read_all("0\r\n\r\n");
  EXPECT_EQ(empty.status, 0) << empty.error;
  EXPECT_EQ(empty.body, "");
}

TEST(ChunkedBody, RefusesWhatTheGrammarDoesNotAllow) {
  struct Case {
    const char* name;
    std::string input;
    int status;
    const char* says;
  };
  const Case cases[] = {
      // httplib took "hello" as the body and "XX0\r\n\r\n..." as a next request.
      {"data not followed by CRLF", "5\r\nhelloXX0\r\n\r\n", 400, "not followed by CRLF"},
      {"bare LF after the size", "5\nhello\r\n0\r\n\r\n", 400, "does not end with CRLF"},
      {"not hex", "5x\r\nhello\r\n0\r\n\r\n", 400, "not a chunk size"},
      {"no size", "\r\nhello\r\n0\r\n\r\n", 400, "not a chunk size"},
      {"sign", "+5\r\nhello\r\n0\r\n\r\n", 400, "not a chunk size"},
      {"17 hex digits", "00000000000000005\r\nhello\r\n0\r\n\r\n", 400, "not a chunk size"},
      {"beyond 2^63", "8000000000000000\r\n", 400, "not a chunk size"},
      {"size line of 5,000 bytes", "5;" + std::string(5000, 'a') + "\r\n", 400, "too long"},
      {"ends inside a chunk", "10\r\nhello", 400, "inside a chunk"},
      {"ends before the last chunk", "5\r\nhello\r\n", 400, "missing"},
      {"no empty line after the trailers", "0\r\nA: b\r\n", 400, "trailer line is missing"},
      {"trailers of 40 KiB", "0\r\n" + std::string(40, 'x') + ": y\r\n", 400, ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::string input = c.input;
    if (std::string(c.name) == "trailers of 40 KiB") {
      for (int i = 0; i < 6; ++i) {
        input.append("T").append(std::to_string(i)).append(": ").append(7000, 'v').append("\r\n");
      }
    }
    const ChunkedBody b = read_all(input);
    EXPECT_EQ(b.status, c.status) << b.error;
    EXPECT_NE(b.error.find(c.says), std::string::npos) << b.error;
  }
}

TEST(ChunkedBody, ABodyOverTheLimitIsA413BeforeItIsRead) {
  const ChunkedBody b = read_all("4\r\nabcd\r\n7FFFFFFF\r\n", 1000);
  EXPECT_EQ(b.status, 413);
  EXPECT_NE(b.error.find("limit of 1000 bytes"), std::string::npos) << b.error;
  EXPECT_EQ(read_all("4\r\nabcd\r\n4\r\nefgh\r\n0\r\n\r\n", 8).status, 0);
  EXPECT_EQ(read_all("4\r\nabcd\r\n5\r\nefghi\r\n0\r\n\r\n", 8).status, 413);
}

TEST(ChunkedBody, OnlyOneUnambiguousChunkedFramingIsTaken) {
  EXPECT_TRUE(is_plainly_chunked("POST /v1/x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"));
  EXPECT_TRUE(is_plainly_chunked("POST /v1/x HTTP/1.1\r\ntransfer-encoding:  CHUNKED \r\n\r\n"));
  // Ambiguous or other framings stay httplib's (and request_framing.h refuses them).
  EXPECT_FALSE(is_plainly_chunked("POST /v1/x HTTP/1.1\r\nContent-Length: 5\r\n\r\n"));
  EXPECT_FALSE(is_plainly_chunked(
      "POST /v1/x HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"));
  EXPECT_FALSE(is_plainly_chunked(
      "POST /v1/x HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n"));
  EXPECT_FALSE(is_plainly_chunked("POST /v1/x HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"));
  EXPECT_FALSE(is_plainly_chunked("POST /v1/x HTTP/1.1\r\nTransfer-Encoding : chunked\r\n\r\n"));
  EXPECT_FALSE(is_plainly_chunked("POST /v1/x HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"));
}

TEST(ChunkedBody, TheHeadGetsAContentLengthInsteadOfTheCoding) {
  const std::string head =
      "POST /v1/completions HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
      "Expect: 100-continue\r\nContent-Type: application/json\r\n\r\n";
  EXPECT_TRUE(expects_continue(head));
  EXPECT_FALSE(expects_continue("POST / HTTP/1.1\r\nHost: a\r\n\r\n"));
  EXPECT_EQ(with_content_length(head, 42),
            "POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
            "Content-Length: 42\r\n\r\n");
}

}  // namespace
}  // namespace kestrel::server
