#include "kestrel/request_stream.h"

#include "core/error.h"
#include "kestrel/llm.h"
#include "runtime/request_state.h"

namespace kestrel {

RequestStream::RequestStream(std::shared_ptr<RequestState> state) : state_(std::move(state)) {}
RequestStream::RequestStream(RequestStream&&) noexcept = default;

RequestStream& RequestStream::operator=(RequestStream&& other) noexcept {
  if (this != &other) {
    abort();
    state_ = std::move(other.state_);
  }
  return *this;
}

RequestStream::~RequestStream() { abort(); }

const std::string& RequestStream::request_id() const { return state_->id; }

std::vector<RequestOutput> RequestStream::take() {
  std::vector<RequestOutput> out(std::make_move_iterator(state_->outputs.begin()),
                                 std::make_move_iterator(state_->outputs.end()));
  state_->outputs.clear();
  return out;
}

std::optional<RequestOutput> RequestStream::next() {
  while (state_->outputs.empty()) {
    if (state_->finished || state_->llm == nullptr) return std::nullopt;
    KS_CHECK(state_->llm->step() || !state_->outputs.empty() || state_->finished,
             "request '{}' is unfinished but the engine has nothing to do", state_->id);
  }
  RequestOutput out = std::move(state_->outputs.front());
  state_->outputs.pop_front();
  return out;
}

bool RequestStream::finished() const { return state_->finished; }

void RequestStream::abort() {
  if (state_ && !state_->finished && state_->llm != nullptr) state_->llm->abort(*state_);
}

}  // namespace kestrel
