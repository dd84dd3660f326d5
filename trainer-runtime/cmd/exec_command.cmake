# `exec` follows the cloudml-hypertune file of the command it runs.
target_link_libraries(kubetrain-runtime PRIVATE kubetrain_runtime_hypertune)
