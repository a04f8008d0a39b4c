#pragma once
// Checks that keep a task honest (DESIGN.md section 3): does its reference depend on every input,
// and would a zeros, constant or copied-input "kernel" pass its correctness check?
#include <string>
#include <vector>

#include "env/task_runtime.hpp"
#include "env/verifier.hpp"

namespace leap::env {

/// One weakness of a task.
struct Weakness {
  std::string kind;    ///< ignores_input | constant_input | zeros_pass | constant_pass | copy_pass | nonfinite_reference | baked_device
  std::string detail;  ///< human-readable explanation
};

/// Runs the weak-task checks on the verifier's correctness seeds (same inputs, same comparison):
/// - ignores_input: the outputs stay within the correctness tolerance when one input is redrawn
///   from another seed (an answer that ignores the input passes);
/// - constant_input: an input of more than one element holds one value everywhere on every seed
///   (a weight of ones, a bias of zeros), so an answer that assumes that value passes;
/// - zeros_pass / constant_pass / copy_pass: an output filled with zeros, with one constant (the
///   mean of the first seed's reference) or with a copy of a same-sized input passes on every seed;
/// - nonfinite_reference: the reference produces NaN or inf on some seed's inputs;
/// - baked_device: the reference holds a device constant (Reference::baked_devices), e.g. a
///   KernelBench trace of `torch.zeros(..., device=x.device)` made on the CPU.
/// Throws leap::Error if the reference itself fails.
std::vector<Weakness> find_weaknesses(const RuntimeTask& task, const VerifierOptions& options);

}  // namespace leap::env
