#pragma once
// OpenMP's wait policy for leap's CPU work. LibTorch's OpenMP runtime (libgomp) spins at barriers
// by default, so a 2-thread policy on a machine with one free core spins against itself and its
// neighbour (README "The two commands": the quickstart beside a busy core). libgomp reads
// OMP_WAIT_POLICY once, when it is loaded, before main() runs, so it can only be chosen for a
// process that has not started yet.

namespace leap::util {

/// Called first in main(): when OMP_WAIT_POLICY is unset and the command runs a policy or the
/// trainer (an argument equal to `train`, `eval`,
/// `model` or `version`, which reports the policy), sets OMP_WAIT_POLICY=PASSIVE
/// (threads sleep at barriers instead of spinning) and re-executes /proc/self/exe with the same
/// arguments; returns only when it did not (the variable was set, another command, or exec
/// failed, which is logged to stderr and harmless: the run then spins). Set OMP_WAIT_POLICY=ACTIVE
/// to keep libgomp's spinning.
void ensure_passive_omp_wait(int argc, char** argv);

}  // namespace leap::util
