# `train` runs single-process or distributed (TF_CONFIG) training and writes
# the cloudml-hypertune metrics file when asked.
target_link_libraries(kubetrain-runtime PRIVATE kubetrain_runtime_dist kubetrain_runtime_hypertune)

# --metrics_address (Prometheus /metrics of the task) needs
# operator/observability, which is added after this folder: decided once every
# folder has been added; without it the flag is a usage error.
function(kubetrain_runtime_train_link_observability)
  if(TARGET kubetrain_observability)
    target_link_libraries(kubetrain-runtime PRIVATE kubetrain_observability)
    target_compile_definitions(kubetrain-runtime PRIVATE KUBETRAIN_RUNTIME_WITH_METRICS=1)
  endif()
endfunction()
cmake_language(DEFER DIRECTORY ${PROJECT_SOURCE_DIR} CALL kubetrain_runtime_train_link_observability)
