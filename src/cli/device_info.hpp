#pragma once
// One line describing where a run computes, for `leap train` run records (event kind "device").
#include <string>

#include "config/experiment.hpp"

namespace leap::cli {

/// "policy: cpu (1 threads), libtorch 2.11.0; env: cpu backend; gpu: none (...); nvrtc 13.0" or,
/// with a GPU, "...; gpu 0: NVIDIA H200, sm_90, 132 SMs, L2 60 MiB, 140 GiB, driver 13.0; ...".
/// `gpu` is the CUDA ordinal this rank uses (LOCAL_RANK). The GPU is queried in a forked child
/// (env::probe_cuda_device), so this process never initialises CUDA. Never throws for a missing
/// GPU or driver: that is part of the description.
std::string describe_devices(const config::Experiment& exp, bool cuda_policy, int gpu);

}  // namespace leap::cli
