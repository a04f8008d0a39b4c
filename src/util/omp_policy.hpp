#pragma once
// How LibTorch's OpenMP threads wait for work. libgomp (the OpenMP runtime of the torch wheel)
// spins 300000 times at a barrier before it sleeps, so a 2-thread policy on a machine where another
// process holds a core spins against itself and its neighbour: the quickstart took 3x its quiet
// time beside a one-core busy loop. leap sets a short spin instead (GOMP_SPINCOUNT=300): 1.5x the
// quiet time beside the busy loop, at about 20% more quiet time than the long spin; passive waiting
// (OMP_WAIT_POLICY=PASSIVE) was 1.5x slower when quiet (figures: README "The two commands").
// libgomp reads these variables once, when it is loaded, before main() runs, so they can
// only be chosen for a process that has not started yet.

namespace leap::util {

/// The spin count leap gives libgomp when the user set neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT.
inline constexpr const char* kGompSpinCount = "300";

/// Called first in main(): when neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT is set and the command
/// runs a policy or the trainer (an argument equal to `train`, `eval`, `model` or `version`, which
/// reports the setting), sets GOMP_SPINCOUNT=kGompSpinCount and re-executes /proc/self/exe with the
/// same arguments; returns only when it did not (a variable was set, another command, or exec
/// failed, which is logged to stderr and harmless: libgomp keeps its default then). Set
/// OMP_WAIT_POLICY or GOMP_SPINCOUNT to choose another policy.
void ensure_short_omp_spin(int argc, char** argv);

/// What leap's OpenMP threads were started with, for `leap version` and the run's device event:
/// e.g. "GOMP_SPINCOUNT=300", "OMP_WAIT_POLICY=PASSIVE", or "libgomp default (spins 300000)".
const char* omp_wait_setting();

}  // namespace leap::util
