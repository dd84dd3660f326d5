#pragma once

// `kubetrain jobs submit training --package-path DIR` on Kubernetes: the
// trainer package is built on the user's machine as gcloud built it, into an
// sdist (a source distribution, NAME-VERSION.tar.gz) that the replicas
// install with pip (operator/core/python_module.h).
//
// Like gcloud, the build runs setuptools with DIR's parent as its context:
//   - when the parent holds a setup.py, that one, with its egg-info, build
//     and dist folders in a temporary folder (the user's tree is not written
//     to);
//   - otherwise a setup.py of our own, `setup(name=<DIR's name>,
//     version="0.0.0", packages=find_packages(include=[<name>, <name>.*]))`,
//     next to a copy of DIR (its Python packages only, no __pycache__):
//     other files need a setup.py of the user's that declares them.

#include <string>

#include "absl/status/statusor.h"

namespace kubetrain::cli {

struct BuiltPackage {
  std::string file_name;  // e.g. "trainer-0.0.0.tar.gz"
  std::string bytes;      // the file's contents
};

// Builds the sdist of the package folder `package_dir` with `python` (a name
// looked up on PATH, or a path), which needs setuptools. Errors name the
// flag: InvalidArgument when `package_dir` is not a folder, Internal with the
// tail of setuptools' output when the build fails or makes no .tar.gz.
absl::StatusOr<BuiltPackage> BuildSdist(const std::string& package_dir,
                                        const std::string& python = "python3");

}  // namespace kubetrain::cli
