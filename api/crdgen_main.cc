// kubetrain-crdgen [OUTPUT]: writes the TrainingJob CRD (to stdout without OUTPUT).
#include <fstream>
#include <iostream>

#include "api/crd.h"

int main(int argc, char** argv) {
  const std::string yaml = kubetrain::api::TrainingJobCrdYaml();
  if (argc < 2) {
    std::cout << yaml;
    return 0;
  }
  std::ofstream out(argv[1], std::ios::trunc);
  out << yaml;
  out.close();
  if (!out) {
    std::cerr << "kubetrain-crdgen: cannot write " << argv[1] << "\n";
    return 1;
  }
  return 0;
}
