# `train` runs single-process or distributed (TF_CONFIG) training, writes the
# cloudml-hypertune metrics file when asked, and serves the task's Prometheus
# metrics with --metrics_address.
target_link_libraries(kubetrain_runtime_commands PUBLIC kubetrain_runtime_dist kubetrain_hypertune
  kubetrain_runtime_metrics kubetrain_metrics_server kubetrain_flags)
