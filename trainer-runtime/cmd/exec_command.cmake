# `exec` follows the cloudml-hypertune file of the command it runs, and reads
# TF_CONFIG to know whether its replica is the chief.
target_link_libraries(kubetrain-runtime PRIVATE kubetrain_hypertune kubetrain_runtime_dist)
