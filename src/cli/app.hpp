#pragma once
// The `leap` command line: builds the CLI11 app from the subcommands in src/cli/ and runs it.

namespace leap::cli {

/// Parses argv, runs the chosen subcommand and returns the process exit status
/// (0 ok, 1 failure, 2 bad usage or config, 3 not built yet). Never throws.
int run(int argc, char** argv);

}  // namespace leap::cli
