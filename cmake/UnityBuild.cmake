# Files that compile on their own in a unity build: test targets are unity
# builds in every build (kubetrain_test), the other targets in the sanitizer
# builds of scripts/test.sh (CMAKE_UNITY_BUILD=ON). Each file here has a
# file-local name that another file of its target defines differently, so the
# two cannot share a batch; in a target that is not a unity build the property
# does nothing. Included after every component, since a source's properties are
# set in the folder that adds its target.

function(_kubetrain_unity_alone folder)
  list(TRANSFORM ARGN PREPEND "${PROJECT_SOURCE_DIR}/${folder}/")
  set_source_files_properties(${ARGN} DIRECTORY "${PROJECT_SOURCE_DIR}/${folder}"
                              PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
endfunction()

# Fail(), as in exec_command.cc.
_kubetrain_unity_alone(trainer-runtime/cmd train_command.cc)
