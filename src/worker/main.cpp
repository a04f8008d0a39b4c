// leap-worker: the lean zygote (env/zygote.hpp, ZygoteImage::lean). It starts the cpu backend's
// sandboxed workers and the sandboxed compiler, and links none of LibTorch, MKL, oneDNN or SLEEF:
// a cpu answer's host code runs in its worker's process, and every library mapped there is one
// `dlsym` away from it (issue "Environment V"; docs/env.md "Sandbox"). Started only by leap.
#include <cstdio>

#include "env/zygote.hpp"

int main(int argc, char** argv) {
  if (leap::env::is_zygote_invocation(argc, argv)) return leap::env::zygote_main(argc, argv);
  std::fprintf(stderr, "leap-worker: started by leap only (it serves sandboxed cpu workers)\n");
  return 2;
}
