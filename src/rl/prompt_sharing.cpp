#include "rl/prompt_sharing.hpp"

#include <algorithm>
#include <numeric>

namespace leap::rl {

namespace {

size_t common_prefix(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

}  // namespace

std::vector<ShareUnit> plan_prompt_sharing(const std::vector<const std::vector<int64_t>*>& prompts,
                                           size_t min_prefix) {
  std::vector<ShareUnit> plan;
  for (const auto* p : prompts)
    if (p->size() < 2) return plan;
  std::vector<size_t> order(prompts.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return *prompts[a] < *prompts[b]; });
  min_prefix = std::max<size_t>(1, min_prefix);
  for (size_t i : order) {
    const auto& p = *prompts[i];
    if (!plan.empty()) {
      ShareUnit& u = plan.back();
      const auto& first = *prompts[u.members.front()];
      // The unit's prefix is a prefix of its first member, so the common prefix with it is the
      // common prefix with all; capped so that this member keeps a token of its own.
      const size_t shared = std::min({u.prefix_len, common_prefix(first, p), p.size() - 1});
      const size_t n = u.members.size();
      if (shared >= min_prefix && n * shared >= (n - 1) * u.prefix_len) {
        u.members.push_back(i);
        u.prefix_len = shared;
        continue;
      }
    }
    plan.push_back({{i}, p.size() - 1});
  }
  return plan;
}

double shared_prompt_fraction(const std::vector<const std::vector<int64_t>*>& prompts,
                              const std::vector<ShareUnit>& plan) {
  if (plan.empty()) return 1.0;
  double whole = 0, shared = 0;
  for (const auto* p : prompts) whole += static_cast<double>(p->size());
  for (const auto& u : plan) {
    shared += static_cast<double>(u.prefix_len);
    for (size_t m : u.members) shared += static_cast<double>(prompts[m]->size() - u.prefix_len);
  }
  return whole > 0 ? shared / whole : 1.0;
}

}  // namespace leap::rl
