# Sourced (not run) by the scripts that call podman or buildah:
#   source scripts/containers-env.sh; kubetrain_containers_env DIR
# Unless the caller set CONTAINERS_CONF, writes DIR/containers.conf and points
# CONTAINERS_CONF at it (podman and buildah then read only that file):
# - default ulimits no higher than this shell's hard limits. podman's own
#   default (1048576 open files and processes) needs CAP_SYS_RESOURCE, and a
#   root without it gets "error setting rlimit type 7: operation not
#   permitted". Processes are also capped at kernel.pid_max: higher values
#   were refused the same way.
# - runc when it is installed: crun refuses a host whose cgroup v2 mount keeps
#   controllers while v1 is in use ("cgroups in hybrid mode not supported").
# - the CNI network backend, whose dnsname plugin lets containers on one
#   network reach each other by name (install-deps.sh --images installs it).

kubetrain_containers_env() {
  local dir=$1
  if [[ -n "${CONTAINERS_CONF:-}" ]]; then return 0; fi
  local nofile nproc pid_max
  nofile=$(ulimit -Hn)
  nproc=$(ulimit -Hu)
  pid_max=$(cat /proc/sys/kernel/pid_max 2>/dev/null || echo 32768)
  [[ $nofile == unlimited ]] && nofile=1048576
  if [[ $nproc == unlimited ]] || ((nproc > pid_max)); then nproc=$pid_max; fi
  mkdir -p "$dir"
  {
    echo '[containers]'
    echo "default_ulimits = [\"nofile=$nofile:$nofile\", \"nproc=$nproc:$nproc\"]"
    echo '[network]'
    echo 'network_backend = "cni"'
    if command -v runc >/dev/null 2>&1; then
      echo '[engine]'
      echo 'runtime = "runc"'
    fi
  } >"$dir/containers.conf"
  export CONTAINERS_CONF="$dir/containers.conf"
}
