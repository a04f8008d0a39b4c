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
  const size_t n = prompts.size();
  if (n == 0) return plan;
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return *prompts[a] < *prompts[b]; });
  min_prefix = std::max<size_t>(1, min_prefix);
  const auto len = [&](size_t k) { return prompts[order[k]]->size(); };
  // In sorted order the prompts sharing a prefix are contiguous, and the common prefix of a run
  // is the smallest common prefix of its neighbours. best[j]: the fewest tokens that sorted
  // prompts 0..j-1 run, cut into runs (units) of one prefix each.
  std::vector<size_t> adjacent(n, 0);
  for (size_t k = 0; k + 1 < n; ++k) adjacent[k] = common_prefix(*prompts[order[k]], *prompts[order[k + 1]]);
  std::vector<size_t> sum(n + 1, 0);  // sum[k]: tokens of sorted prompts 0..k-1
  for (size_t k = 0; k < n; ++k) sum[k + 1] = sum[k] + len(k);
  const size_t none = static_cast<size_t>(-1);
  std::vector<size_t> best(n + 1, none), cut(n + 1, 0), prefix(n + 1, 0);
  best[0] = 0;
  for (size_t j = 1; j <= n; ++j) {
    // Runs i..j-1, longest first, so that a tie keeps fewer units.
    size_t shared = none, shortest = none;
    std::vector<std::pair<size_t, size_t>> runs;  // (i, prefix_len)
    for (size_t i = j; i-- > 0;) {
      shortest = std::min(shortest, len(i));
      if (i + 1 < j) shared = std::min(shared, adjacent[i]);
      const size_t members = j - i;
      // One member keeps one token of its own; more keep at least one each, with min_prefix shared.
      const size_t p = members == 1 ? len(i) - 1 : std::min(shared, shortest - 1);
      if (members > 1 && p < min_prefix) break;  // longer runs only share less
      runs.emplace_back(i, p);
    }
    for (auto it = runs.rbegin(); it != runs.rend(); ++it) {
      const auto [i, p] = *it;
      const size_t cost = best[i] + p + (sum[j] - sum[i]) - (j - i) * p;  // the prefix once, every member's rest
      if (best[j] == none || cost < best[j]) {
        best[j] = cost;
        cut[j] = i;
        prefix[j] = p;
      }
    }
  }
  for (size_t j = n; j > 0; j = cut[j]) {
    ShareUnit u;
    for (size_t k = cut[j]; k < j; ++k) u.members.push_back(order[k]);
    u.prefix_len = prefix[j];
    plan.push_back(std::move(u));
  }
  std::reverse(plan.begin(), plan.end());
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
