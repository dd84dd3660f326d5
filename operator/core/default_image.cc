#include "operator/core/reconciler.h"

#ifndef KUBETRAIN_VERSION
#error "KUBETRAIN_VERSION must be the project version (operator/core/CMakeLists.txt)"
#endif

namespace kubetrain::core {

const char kDefaultRuntimeImage[] = "kubetrain/kubetrain-runtime:" KUBETRAIN_VERSION;

}  // namespace kubetrain::core
