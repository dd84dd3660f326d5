# syntax=docker/dockerfile:1
# kubetrain-runtime image: the training runtime every replica pod runs.
#   docker build -f deploy/docker/runtime.Dockerfile -t kubetrain/kubetrain-runtime:0.1.0 .
#
# Trainer code may shell out (custom containers derive from this image), so the
# final stage is debian:12-slim with only the runtime libraries, run by an
# unprivileged user whose home is the working directory.
#
# GPU variant (optional): build the same stages on the CUDA toolkit's images,
#   docker build -f deploy/docker/runtime.Dockerfile \
#     --build-arg BUILD_BASE=nvidia/cuda:12.4.1-devel-ubuntu22.04 \
#     --build-arg RUN_BASE=nvidia/cuda:12.4.1-runtime-ubuntu22.04 \
#     --build-arg CUDA=ON -t kubetrain/kubetrain-runtime:0.1.0-cuda12 .
# (CUDA's images are Ubuntu-based; the package names below exist there too.)
# Replicas with acceleratorConfig get nvidia.com/gpu limits; the NVIDIA device
# plugin mounts the driver at run time.

ARG BUILD_BASE=debian:12
ARG RUN_BASE=debian:12-slim

FROM ${BUILD_BASE} AS build
ARG DEBIAN_FRONTEND=noninteractive
ARG CUDA=OFF
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config ca-certificates \
      libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev \
      libcpprest-dev libssl-dev libyaml-cpp-dev nlohmann-json3-dev prometheus-cpp-dev \
      libcivetweb-dev libsqlite3-dev libopenblas-dev zlib1g-dev libeigen3-dev \
      libgtest-dev libgmock-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DKUBETRAIN_CUDA=${CUDA} -DKUBETRAIN_BENCH=OFF \
 && cmake --build /build --target kubetrain-runtime

FROM ${RUN_BASE} AS final
ARG DEBIAN_FRONTEND=noninteractive
# Shared libraries only (no -dev packages, no compilers).
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      ca-certificates libgrpc++1.51 libprotobuf32 libcpprest2.10 libyaml-cpp0.7 \
      libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 libcivetweb1 libsqlite3-0 \
      libopenblas0-pthread zlib1g libabsl20220623 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 65532 kubetrain \
 && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /work --shell /usr/sbin/nologin kubetrain \
 && mkdir -p /work && chown 65532:65532 /work
COPY --from=build /build/trainer-runtime/cmd/kubetrain-runtime /usr/local/bin/kubetrain-runtime
WORKDIR /work
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/kubetrain-runtime"]
