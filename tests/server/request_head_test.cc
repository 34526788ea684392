// The request-head scanner of the connection gate: where a head ends, as bytes arrive in
// pieces, and the limits that make a 414 or a 431.
#include "server/request_head.h"

#include <gtest/gtest.h>

namespace kestrel::server {
namespace {

TEST(RequestHead, EndsAtTheFirstEmptyLineWhateverThePieces) {
  const std::string head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n";
  for (size_t piece : {size_t{1}, size_t{3}, size_t{17}, head.size()}) {
    SCOPED_TRACE(piece);
    HeadScanner scanner;
    std::string bytes;
    HeadState state = HeadState::kPartial;
    for (size_t at = 0; at < head.size(); at += piece) {
      EXPECT_EQ(state, HeadState::kPartial) << "ended early, at byte " << at;
      bytes += head.substr(at, piece);
      state = scanner.scan(bytes);
    }
    bytes += "{}";  // the body that follows is not part of it
    EXPECT_EQ(state, HeadState::kComplete);
    EXPECT_EQ(scanner.head_bytes(), head.size());
  }
}

TEST(RequestHead, ABareNewlineDoesNotEndItAndEmptyLinesBeforeItAreDropped) {
  HeadScanner scanner;
  std::string bytes = "GET /health HTTP/1.1\nHost: x\n\n";
  EXPECT_EQ(scanner.scan(bytes), HeadState::kPartial);  // httplib skips such lines

  HeadScanner after_body;
  std::string next = "\r\n\r\nGET /health HTTP/1.1\r\n\r\n";
  EXPECT_EQ(after_body.scan(next), HeadState::kComplete);
  EXPECT_EQ(next, "GET /health HTTP/1.1\r\n\r\n");
  EXPECT_EQ(after_body.head_bytes(), next.size());
}

TEST(RequestHead, LongLinesAndLargeHeadsAreRefusedBeforeTheirEnd) {
  const std::string get = "GET /";
  std::string fits = get + std::string(kMaxRequestLineBytes - get.size() - 11, 'a') + " HTTP/1.1\r\n";
  ASSERT_EQ(fits.size(), kMaxRequestLineBytes);
  EXPECT_EQ(HeadScanner().scan(fits), HeadState::kPartial);
  std::string uri = get + std::string(kMaxRequestLineBytes, 'a');  // no line end yet
  EXPECT_EQ(HeadScanner().scan(uri), HeadState::kUriTooLong);

  std::string header = "GET / HTTP/1.1\r\nX-Big: " + std::string(kMaxHeaderLineBytes, 'b');
  EXPECT_EQ(HeadScanner().scan(header), HeadState::kHeadersTooLarge);

  std::string many = "GET / HTTP/1.1\r\n";
  HeadScanner scanner;
  HeadState state = HeadState::kPartial;
  for (int i = 0; state == HeadState::kPartial && i < 10000; ++i) {
    many += "X-Header-" + std::to_string(i) + ": " + std::string(100, 'c') + "\r\n";
    state = scanner.scan(many);
  }
  EXPECT_EQ(state, HeadState::kHeadersTooLarge);
  EXPECT_LE(many.size(), kMaxHeadBytes + 200);
}

}  // namespace
}  // namespace kestrel::server
