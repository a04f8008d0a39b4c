// The order a Grader's threads take requests in (rl/grade_queue.hpp): identical answers apart.
#include <doctest/doctest.h>

#include <set>
#include <string>
#include <thread>
#include <vector>

#include "rl/grade_queue.hpp"

using leap::rl::GradeQueue;

TEST_SUITE_BEGIN("rl");

TEST_CASE("grade queue: a copy of an answer in flight waits while other requests are taken, then comes next") {
  // A group's repeated samples in a row, as the rollout engine lists them: A A B B C.
  GradeQueue q({"A", "A", "B", "B", "C"});
  CHECK(q.next() == 0);  // A
  CHECK(q.next() == 2);  // not the second A while the first is graded: B
  CHECK(q.next() == 4);  // C
  q.done(0);
  CHECK(q.next() == 1);  // the second A, now that the first is done
  // Only copies of answers in flight are left (B): the first of them, rather than an idle thread.
  CHECK(q.next() == 3);
  CHECK(q.next() == -1);
  q.done(2);
  q.done(4);
  q.done(1);
  q.done(3);
  CHECK(q.next() == -1);
}

TEST_CASE("grade queue: every request is handed out once to threads taking them at once") {
  std::vector<std::string> keys;
  for (int i = 0; i < 500; ++i) keys.push_back(std::to_string(i % 7));
  GradeQueue q(keys);
  std::vector<std::vector<long>> taken(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < taken.size(); ++t)
    threads.emplace_back([&, t] {
      for (long i; (i = q.next()) >= 0;) {
        taken[t].push_back(i);
        q.done(static_cast<size_t>(i));
      }
    });
  for (auto& th : threads) th.join();
  std::multiset<long> all;
  for (const auto& v : taken) all.insert(v.begin(), v.end());
  CHECK(all.size() == keys.size());
  for (long i = 0; i < static_cast<long>(keys.size()); ++i) CHECK(all.count(i) == 1);
}

TEST_SUITE_END();
