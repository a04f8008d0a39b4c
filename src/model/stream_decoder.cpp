#include "model/stream_decoder.hpp"

#include "model/utf8.hpp"

namespace leap::model {

std::string StreamDecoder::push(TokenId id) {
  if (skip_special_ && tok_->is_special(id)) return {};
  pending_ += tok_->token_bytes(id);
  std::size_t held = 0;
  std::string out = utf8_lossy_hold_tail(pending_, &held);
  pending_.erase(0, pending_.size() - held);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = utf8_lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace leap::model
