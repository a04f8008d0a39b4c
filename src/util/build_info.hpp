#pragma once
// Facts about this build that change with every commit, kept out of compile definitions so a
// new commit recompiles one generated file (cmake/BuildInfo.cmake) rather than every source.

namespace leap {

/// Short git commit (12 hex digits) the binary was built from, or "unknown" outside a checkout.
const char* git_commit() noexcept;

}  // namespace leap
