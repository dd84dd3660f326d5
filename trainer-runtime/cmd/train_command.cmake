# `train` runs single-process or distributed (TF_CONFIG) training and writes
# the cloudml-hypertune metrics file when asked.
target_link_libraries(kubetrain-runtime PRIVATE kubetrain_runtime_dist kubetrain_runtime_hypertune)
