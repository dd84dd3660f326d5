#pragma once

// The subcommands of kubetrain-runtime (`kubetrain-runtime <command> [flags]`).
//
// A subcommand lives in its own file in this folder named `*_command.cc`
// (picked up by CMakeLists.txt's glob) and registers itself:
//
//   KUBETRAIN_RUNTIME_SUBCOMMAND(serve, "serve an exported model", RunServe);
//
// where `int RunServe(const std::vector<std::string>& args)` gets the
// arguments after the command name and returns the process exit code
// (trainer-runtime/exit_codes.h). Libraries a subcommand needs are linked by
// a `<name>_command.cmake` file beside it, which CMakeLists.txt includes:
//
//   target_link_libraries(kubetrain-runtime PRIVATE kubetrain_runtime_serve)

#include <map>
#include <string>
#include <vector>

namespace kubetrain::runtime::cmd {

using SubcommandFn = int (*)(const std::vector<std::string>& args);

struct Subcommand {
  std::string help;
  SubcommandFn run = nullptr;
};

// All registered subcommands, by name. Filled by static registrars before
// main runs; read-only afterwards.
std::map<std::string, Subcommand>& Subcommands();

struct SubcommandRegistrar {
  SubcommandRegistrar(const char* name, const char* help, SubcommandFn run) {
    Subcommands()[name] = Subcommand{help, run};
  }
};

}  // namespace kubetrain::runtime::cmd

#define KUBETRAIN_RUNTIME_SUBCOMMAND(name, help, fn) \
  static ::kubetrain::runtime::cmd::SubcommandRegistrar kubetrain_subcommand_##name(#name, help, fn)
