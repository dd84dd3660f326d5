# `exec` follows the cloudml-hypertune file of the command it runs, reads
# TF_CONFIG to know whether its replica is the chief, and installs the
# command's packages.
target_link_libraries(kubetrain_runtime_commands PUBLIC kubetrain_hypertune kubetrain_runtime_dist
  kubetrain_runtime_packages kubetrain_flags)
