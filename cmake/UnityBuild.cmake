# Files that compile on their own in a unity build (CMAKE_UNITY_BUILD=ON, used
# by the sanitizer builds of scripts/test.sh): each has a file-local name that
# another file of its target defines differently, so the two cannot share a
# batch. Included after every component, since a source's properties are set in
# the folder that adds its target.
if(NOT CMAKE_UNITY_BUILD)
  return()
endif()

function(_kubetrain_unity_alone folder)
  list(TRANSFORM ARGN PREPEND "${PROJECT_SOURCE_DIR}/${folder}/")
  set_source_files_properties(${ARGN} DIRECTORY "${PROJECT_SOURCE_DIR}/${folder}"
                              PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
endfunction()

# Job(), CustomJob() and Case: each test builds its own jobs and tables.
_kubetrain_unity_alone(operator/core
  reconciler_test.cc waiting_reasons_test.cc tf_config_test.cc)
# kT0, the fake clock's start, as in expectations_test.cc.
_kubetrain_unity_alone(operator/kube leader_election_test.cc)
# ReadSmallFile(), as in controller.cc, with another return type.
_kubetrain_unity_alone(operator/local process_launcher.cc)
# Fail(), as in exec_command.cc.
_kubetrain_unity_alone(trainer-runtime/cmd train_command.cc)
# Soon(), as in collectives_test.cc.
_kubetrain_unity_alone(trainer-runtime/dist shm/shm_transport_test.cc)
