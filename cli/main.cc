#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "cli/cli.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  // Run by kubectl as a plugin (`kubectl kubetrain ...` execs
  // kubectl-kubetrain): the user is in kubectl's world, so jobs are those of
  // the cluster in kubectl's current context and namespace, whatever
  // KUBETRAIN_BACKEND says for the standalone tool (--local still works).
  if (argc > 0 && std::filesystem::path(argv[0]).filename() == kubetrain::cli::kKubectlPluginName) {
    unsetenv("KUBETRAIN_BACKEND");
    return kubetrain::cli::RunCli(args, std::cout, std::cerr, "kubectl kubetrain");
  }
  return kubetrain::cli::RunCli(args, std::cout, std::cerr);
}
