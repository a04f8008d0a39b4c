#pragma once
// Precompiled header for leap_core (see cmake/LeapTorch.cmake). Never include this directly.
#include <torch/torch.h>
#include <string>
#include <vector>
#include <map>
#include <memory>
#include <optional>
#include <functional>
