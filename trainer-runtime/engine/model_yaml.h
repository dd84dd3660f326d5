#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "trainer-runtime/engine/model.h"

namespace kubetrain::runtime::engine {

// Parses a Keras-Sequential-like model file:
//
//   layers:
//     - conv2d: 32          # filters
//       kernel_size: 3      # default 3
//       strides: 1          # default 1
//       padding: same       # same (default) or valid
//       activation: relu
//     - maxpool: 2          # pool size; strides default to it, padding valid
//     - flatten             # (or "flatten: {}")
//     - dense: 256
//       activation: relu    # relu, tanh, sigmoid, linear (default); softmax on the last layer
//     - dropout: 0.2
//
// Errors are InvalidArgument naming `file_name` and the line:
// "model.yaml:4: unknown key 'activaton' in a dense layer".
absl::StatusOr<ModelSpec> ParseModelYaml(absl::string_view text, absl::string_view file_name);

}  // namespace kubetrain::runtime::engine
