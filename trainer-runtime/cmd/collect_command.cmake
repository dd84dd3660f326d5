# `collect` follows a trainer's cloudml-hypertune file from a sidecar.
target_link_libraries(kubetrain_runtime_commands PUBLIC kubetrain_hypertune kubetrain_flags)
