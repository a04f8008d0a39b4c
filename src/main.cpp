// leap: entry point. Only wires the subcommands defined in src/cli/.
#include "cli/app.hpp"

int main(int argc, char** argv) { return leap::cli::run(argc, argv); }
