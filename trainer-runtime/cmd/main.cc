// kubetrain-runtime: what runs inside every replica of a training job.
#include <iostream>
#include <string>
#include <vector>

#include "trainer-runtime/cmd/device_factory.h"
#include "trainer-runtime/cmd/subcommand.h"
#include "trainer-runtime/exit_codes.h"

namespace kubetrain::runtime::cmd {

std::map<std::string, Subcommand>& Subcommands() {
  static auto* commands = new std::map<std::string, Subcommand>();
  return *commands;
}

namespace {

void PrintUsage(std::ostream& out) {
  out << "usage: kubetrain-runtime <command> [flags]\n\ncommands:\n";
  for (const auto& [name, command] : Subcommands())
    out << "  " << name << "  " << command.help << "\n";
  out << "\n`kubetrain-runtime <command> --help` lists a command's flags.\n";
}

}  // namespace
}  // namespace kubetrain::runtime::cmd

int main(int argc, char** argv) {
  using namespace kubetrain::runtime;
  if (argc < 2) {
    cmd::PrintUsage(std::cerr);
    return kExitUsage;
  }
  std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    cmd::PrintUsage(std::cout);
    return kExitOk;
  }
  auto it = cmd::Subcommands().find(name);
  if (it == cmd::Subcommands().end()) {
    std::cerr << "kubetrain-runtime: unknown command '" << name << "'\n";
    cmd::PrintUsage(std::cerr);
    return kExitUsage;
  }
  // Every subcommand's trainer places its graph with --device through the
  // factory that knows this build's devices (CUDA when linked in).
  engine::SetDefaultDeviceFactory(cmd::CreateTrainerDevice);
  std::vector<std::string> args(argv + 2, argv + argc);
  return it->second.run(args);
}
