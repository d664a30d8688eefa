# syntax=docker/dockerfile:1
# hourglass in a container: `hourglass run` as a non-root user, queues.toml
# and handlers/ mounted at /srv/hourglass, health checked on /healthz.
#
#   docker build -t hourglass .                      # the runner alone
#   docker build -t hourglass-demo --target demo .   # plus the example handlers
#   docker run -v $PWD/queues.toml:/srv/hourglass/queues.toml:ro \
#              -v $PWD/handlers:/srv/hourglass/handlers:ro hourglass
#
# See deploy/compose.yaml (Redis with AOF, a runner, the examples) and the
# docs' "Run it in production" (docs/src/production.md).

# --- build: the binary, and the example handlers for the demo image --------
FROM docker.io/library/rust:1.95-bookworm AS build
RUN rustup target add wasm32-wasip2
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p hourglass \
 && cargo build --release --manifest-path handlers/Cargo.toml --target wasm32-wasip2 \
      -p echo -p flaky -p order_cancel -p slow -p panic \
 && mkdir -p /out/handlers \
 && for h in echo flaky order_cancel slow panic; do \
      cp handlers/target/wasm32-wasip2/release/$h.wasm /out/handlers/; \
    done

# --- runtime: the binary, a user, nothing else -----------------------------
FROM docker.io/library/debian:bookworm-slim AS runtime
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /srv/hourglass --create-home hourglass \
 && install -d -o hourglass -g hourglass /srv/hourglass/.hourglass
COPY --from=build /src/target/release/hourglass /usr/local/bin/hourglass
USER hourglass
WORKDIR /srv/hourglass
# the compile cache and kept handler versions (.hourglass/) live beside
# queues.toml: keep them on a volume so restarts start warm (made above and
# owned by the user: a volume's mount point the image lacks is root's)
VOLUME ["/srv/hourglass/.hourglass"]
ENV RUST_LOG=info,wasmtime=warn,cranelift=warn
EXPOSE 9090
# [http] listen must be reachable inside the container (0.0.0.0:9090)
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
  CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/9090 && printf 'GET /healthz HTTP/1.0\\r\\n\\r\\n' >&3 && head -1 <&3 | grep -q ' 200 '"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["hourglass"]
CMD ["run", "--config", "/srv/hourglass/queues.toml"]

# --- demo: the runtime with the example handlers and deploy/queues.toml ----
FROM runtime AS demo
COPY --from=build --chown=hourglass /out/handlers /srv/hourglass/handlers
COPY --chown=hourglass deploy/queues.toml /srv/hourglass/queues.toml
