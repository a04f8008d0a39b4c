#include "model/normalizer.hpp"

#include <nlohmann/json.hpp>

#include "util/error.hpp"

namespace leap::model {

namespace {
void add_steps(const nlohmann::json& j, const std::string& source, std::vector<NormalForm>& steps) {
  if (j.is_null()) return;
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    throw ModelError(source + ": normalizer has no \"type\"");
  const std::string type = j["type"].get<std::string>();
  if (type == "NFC") steps.push_back(NormalForm::NFC);
  else if (type == "NFD") steps.push_back(NormalForm::NFD);
  else if (type == "NFKC") steps.push_back(NormalForm::NFKC);
  else if (type == "NFKD") steps.push_back(NormalForm::NFKD);
  else if (type == "Sequence" && j.contains("normalizers") && j["normalizers"].is_array())
    for (const auto& n : j["normalizers"]) add_steps(n, source, steps);
  else
    throw ModelError(source + ": unsupported normalizer type \"" + type +
                     "\" (supported: null, NFC, NFD, NFKC, NFKD, Sequence of these)");
}
}  // namespace

Normalizer Normalizer::from_json(const nlohmann::json& j, const std::string& source) {
  Normalizer n;
  add_steps(j, source, n.steps_);
  return n;
}

std::string Normalizer::apply(std::string_view text) const {
  std::string s(text);
  for (NormalForm f : steps_) s = normalize_unicode(s, f);
  return s;
}

}  // namespace leap::model
