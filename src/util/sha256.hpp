#pragma once
// SHA-256 (OpenSSL's EVP interface), for keys where a collision would be a wrong answer: the
// compile caches (env/compile_cache.hpp).
#include <string>
#include <string_view>

namespace leap::util {

/// SHA-256 of `data` as 64 lowercase hex digits. Throws leap::Error if OpenSSL fails.
std::string sha256_hex(std::string_view data);

}  // namespace leap::util
