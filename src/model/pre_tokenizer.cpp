#include "model/pre_tokenizer.hpp"

#include <nlohmann/json.hpp>

#include "util/error.hpp"

namespace leap::model {

namespace {
// GPT-2's pattern, used by ByteLevel when use_regex is true.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

bool flag(const nlohmann::json& j, const char* key, bool def) {
  return j.contains(key) && j[key].is_boolean() ? j[key].get<bool>() : def;
}
}  // namespace

void PreTokenizer::add_steps(const nlohmann::json& j, const std::string& source, std::vector<Step>& steps) {
  if (j.is_null()) return;
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    throw ModelError(source + ": pre_tokenizer has no \"type\"");
  const std::string type = j["type"].get<std::string>();
  if (type == "Sequence") {
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array())
      throw ModelError(source + ": Sequence pre_tokenizer has no \"pretokenizers\" list");
    for (const auto& p : j["pretokenizers"]) add_steps(p, source, steps);
    return;
  }
  Step s;
  if (type == "ByteLevel") {
    s.byte_level = true;
    s.add_prefix_space = flag(j, "add_prefix_space", true);
    if (flag(j, "use_regex", true)) s.regex = std::make_shared<const Regex>(kGpt2Pattern);
  } else if (type == "Split") {
    if (!j.contains("pattern") || !j["pattern"].is_object())
      throw ModelError(source + ": Split pre_tokenizer has no \"pattern\"");
    const auto& p = j["pattern"];
    try {
      if (p.contains("Regex") && p["Regex"].is_string())
        s.regex = std::make_shared<const Regex>(p["Regex"].get<std::string>());
      else if (p.contains("String") && p["String"].is_string())
        s.regex = std::make_shared<const Regex>(p["String"].get<std::string>(), /*literal=*/true);
      else
        throw ModelError("pattern must be {\"Regex\": ...} or {\"String\": ...}");
    } catch (const ModelError& e) {
      throw ModelError(source + ": Split pre_tokenizer: " + e.what());
    }
    const std::string b = j.contains("behavior") && j["behavior"].is_string()
                              ? j["behavior"].get<std::string>() : "Isolated";
    if (b == "Isolated") s.behavior = Behavior::Isolated;
    else if (b == "Removed") s.behavior = Behavior::Removed;
    else if (b == "MergedWithPrevious") s.behavior = Behavior::MergedWithPrevious;
    else if (b == "MergedWithNext") s.behavior = Behavior::MergedWithNext;
    else if (b == "Contiguous") s.behavior = Behavior::Contiguous;
    else
      throw ModelError(source + ": unsupported Split behavior \"" + b +
                       "\" (supported: Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous)");
    s.invert = flag(j, "invert", false);
  } else {
    throw ModelError(source + ": unsupported pre_tokenizer type \"" + type +
                     "\" (supported: Split, ByteLevel, Sequence)");
  }
  steps.push_back(std::move(s));
}

PreTokenizer PreTokenizer::from_json(const nlohmann::json& j, const std::string& source) {
  PreTokenizer p;
  add_steps(j, source, p.steps_);
  return p;
}

void PreTokenizer::apply(const Step& step, std::string_view piece, std::vector<std::string>& out) {
  std::string prefixed;
  if (step.byte_level && step.add_prefix_space && !piece.starts_with(' ')) {
    prefixed = " ";
    prefixed += piece;
    piece = prefixed;
  }
  if (!step.regex) {
    if (!piece.empty()) out.emplace_back(piece);
    return;
  }
  // Cover the piece with (span, is_delimiter) parts.
  struct Part {
    std::size_t b, e;
    bool delim;
  };
  std::vector<Part> parts;
  std::size_t pos = 0;
  for (auto [b, e] : step.regex->find_all(piece)) {
    if (b > pos) parts.push_back({pos, b, false});
    parts.push_back({b, e, true});
    pos = e;
  }
  if (pos < piece.size()) parts.push_back({pos, piece.size(), false});
  if (step.invert)
    for (auto& p : parts) p.delim = !p.delim;

  auto emit = [&](std::size_t b, std::size_t e) {
    if (e > b) out.emplace_back(piece.substr(b, e - b));
  };
  switch (step.behavior) {
    case Behavior::Isolated:
      for (const auto& p : parts) emit(p.b, p.e);
      break;
    case Behavior::Removed:
      for (const auto& p : parts)
        if (!p.delim) emit(p.b, p.e);
      break;
    case Behavior::MergedWithPrevious: {
      // A delimiter closes the piece before it (a delimiter after a delimiter stands alone).
      std::size_t start = 0;
      for (const auto& p : parts)
        if (p.delim) {
          emit(start, p.e);
          start = p.e;
        }
      emit(start, piece.size());
      break;
    }
    case Behavior::MergedWithNext: {
      // A delimiter opens the piece after it (a delimiter before a delimiter stands alone).
      bool pending = false;
      std::size_t pb = 0, pe = 0;
      for (const auto& p : parts) {
        if (p.delim) {
          if (pending) emit(pb, pe);
          pending = true;
          pb = p.b;
          pe = p.e;
        } else {
          emit(pending ? pb : p.b, p.e);
          pending = false;
        }
      }
      if (pending) emit(pb, pe);
      break;
    }
    case Behavior::Contiguous: {
      // Runs of adjacent delimiters become one piece.
      for (std::size_t i = 0; i < parts.size();) {
        std::size_t j = i + 1;
        if (parts[i].delim)
          while (j < parts.size() && parts[j].delim) ++j;
        emit(parts[i].b, parts[j - 1].e);
        i = j;
      }
      break;
    }
  }
}

std::vector<std::string> PreTokenizer::split(std::string_view text) const {
  std::vector<std::string> cur;
  if (!text.empty()) cur.emplace_back(text);
  for (const Step& s : steps_) {
    std::vector<std::string> next;
    for (const auto& piece : cur) apply(s, piece, next);
    cur = std::move(next);
  }
  return cur;
}

}  // namespace leap::model
