// `kubetrain-runtime train` with the distributed strategies, as a binary of
// its own for the multi-process tests (the runtime's main can call the same
// dist::TrainMain).
#include <string>
#include <vector>

#include "trainer-runtime/dist/strategy/task_runner.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return kubetrain::dist::TrainMain(args);
}
