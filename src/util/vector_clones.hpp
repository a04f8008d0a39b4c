#pragma once
// LEAP_VECTOR_CLONES: put before a function whose loops should run at the widest vector width
// the CPU has. GCC and Clang then build one clone per width (x86-64-v4: AVX-512, x86-64-v3: AVX2,
// and the baseline), and the loader picks one at start (an ifunc).
// Use it only on code whose result is the same bits in every clone: integer arithmetic, exact
// compares, floating operations without contraction (-ffp-contract=off). The worker and the
// verifier must agree on what a run was given and what it returned.
// Elsewhere (not x86-64, other compilers) the macro is empty.
#if defined(__x86_64__) && defined(__GNUC__)
#define LEAP_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define LEAP_VECTOR_CLONES
#endif
