// util: hashing and the std::filesystem symbol clash with LibTorch.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "util/hash.hpp"

TEST_CASE("util: fnv1a64 matches the published FNV-1a test vectors") {
  CHECK(leap::util::fnv1a64("") == 0xcbf29ce484222325ULL);
  CHECK(leap::util::fnv1a64("a") == 0xaf63dc4c8601ec8cULL);
  CHECK(leap::util::fnv1a64("foobar") == 0x85944171f73967e8ULL);
  CHECK(leap::util::hash_hex("foobar") == "85944171f73967e8");
  // chaining continues the same hash
  CHECK(leap::util::fnv1a64("bar", leap::util::fnv1a64("foo")) == leap::util::fnv1a64("foobar"));
}

TEST_CASE("util: std::filesystem::remove_all works in a binary linked with LibTorch") {
  // libtorch.so exports its own std::filesystem functions; before the link-order fix in
  // CMakeLists.txt, remove_all resolved to that copy and crashed.
  auto root = std::filesystem::temp_directory_path() / "leap-fs-check";
  std::filesystem::create_directories(root / "a" / "b");
  std::ofstream(root / "a" / "b" / "f.txt") << "x";
  CHECK(std::filesystem::remove_all(root) == 4);
  CHECK_FALSE(std::filesystem::exists(root));
}
