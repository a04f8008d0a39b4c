#include "util/omp_policy.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <unistd.h>

namespace leap::util {

void ensure_passive_omp_wait(int argc, char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  bool runs_policy = false;
  for (int i = 1; i < argc && !runs_policy; ++i)
    runs_policy = std::strcmp(argv[i], "train") == 0 || std::strcmp(argv[i], "eval") == 0 ||
                  std::strcmp(argv[i], "model") == 0 || std::strcmp(argv[i], "version") == 0;
  if (!runs_policy) return;
  if (::setenv("OMP_WAIT_POLICY", "PASSIVE", 1) != 0) return;
  ::execv("/proc/self/exe", argv);
  std::fprintf(stderr, "leap: could not restart with OMP_WAIT_POLICY=PASSIVE (%s); OpenMP threads will spin\n",
               std::strerror(errno));
}

}  // namespace leap::util
