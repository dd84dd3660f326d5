# syntax=docker/dockerfile:1
# kubetrain-operator image. Build from the repository root:
#   docker build -f deploy/docker/operator.Dockerfile -t kubetrain/kubetrain-operator:0.1.0 .
#
# Stages: build (compile), rootfs (collect the binary and exactly the shared
# libraries it loads), final (distroless: no shell, no package manager, runs as
# the non-root user 65532).

FROM debian:12 AS build
ARG DEBIAN_FRONTEND=noninteractive
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
      -DKUBETRAIN_CUDA=OFF -DKUBETRAIN_BENCH=OFF \
 && cmake --build /build --target kubetrain-operator

FROM build AS rootfs
# The binary and its shared-library closure, at the same paths. glibc,
# libstdc++ and OpenSSL come with the distroless base and are skipped.
RUN mkdir -p /out/usr/local/bin \
 && cp /build/operator/cmd/kubetrain-operator /out/usr/local/bin/ \
 && ldd /build/operator/cmd/kubetrain-operator \
    | awk '$3 ~ /^\// { print $3 }' \
    | grep -v -E '/(libc|libm|libpthread|libdl|librt|libstdc\+\+|libgcc_s|libssl|libcrypto)\.so' \
    | xargs -I{} cp --parents -L {} /out

FROM gcr.io/distroless/cc-debian12:nonroot AS final
COPY --from=rootfs /out/ /
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/kubetrain-operator"]
CMD ["--leader-elect=true"]
