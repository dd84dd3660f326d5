#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace kubetrain::cli {

// Runs one `kubetrain` command line (args without the program name), writing
// to `out` and `err`. Returns the process exit code: 0 success, 1 the command
// ran and failed (a job did not succeed, a job was not found), 2 bad input
// (usage, invalid files). `program` is how usage text names the tool
// ("kubectl kubetrain" when run as a kubectl plugin).
int RunCli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
           const std::string& program = "kubetrain");

// The name kubectl finds the kubetrain binary by on PATH: `kubectl kubetrain
// ...` runs `kubectl-kubetrain ...` (a link to, or copy of, `kubetrain`).
inline constexpr char kKubectlPluginName[] = "kubectl-kubetrain";

}  // namespace kubetrain::cli
