#include "util/omp_policy.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <unistd.h>

namespace leap::util {

void ensure_short_omp_spin(int argc, char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) return;
  bool runs_policy = false;
  for (int i = 1; i < argc && !runs_policy; ++i)
    runs_policy = std::strcmp(argv[i], "train") == 0 || std::strcmp(argv[i], "eval") == 0 ||
                  std::strcmp(argv[i], "model") == 0 || std::strcmp(argv[i], "version") == 0;
  if (!runs_policy) return;
  if (::setenv("GOMP_SPINCOUNT", kGompSpinCount, 1) != 0) return;
  ::execv("/proc/self/exe", argv);
  std::fprintf(stderr, "leap: could not restart with GOMP_SPINCOUNT=%s (%s); OpenMP threads keep libgomp's long spin\n",
               kGompSpinCount, std::strerror(errno));
}

const char* omp_wait_setting() {
  static const std::string s = [] {
    const char* policy = std::getenv("OMP_WAIT_POLICY");
    const char* spin = std::getenv("GOMP_SPINCOUNT");
    std::string out;
    if (policy && *policy) out = std::string("OMP_WAIT_POLICY=") + policy;
    if (spin && *spin) out += (out.empty() ? "" : ", ") + std::string("GOMP_SPINCOUNT=") + spin;
    return out.empty() ? std::string("libgomp default (spins 300000)") : out;
  }();
  return s.c_str();
}

}  // namespace leap::util
