# syntax=docker/dockerfile:1

# Build: a static binary (no cgo), reproducible paths.
FROM golang:1.26-alpine AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/taskmaster ./cmd/taskmaster

# Run: a small image with /bin/sh (for `taskmaster worker --exec`) and an
# unprivileged user.
FROM alpine:3.20
RUN addgroup -S -g 10001 taskmaster && adduser -S -D -H -u 10001 -G taskmaster taskmaster
# Where `taskmaster keys create --out` may keep a key: a volume mounted here
# starts owned by the unprivileged user.
RUN mkdir -p /var/lib/taskmaster && chown 10001:10001 /var/lib/taskmaster && chmod 0700 /var/lib/taskmaster
COPY --from=build /out/taskmaster /usr/local/bin/taskmaster
USER 10001:10001
ENV TASKMASTER_HTTP_ADDR=0.0.0.0:8080
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
  CMD wget -qO- http://127.0.0.1:8080/healthz >/dev/null || exit 1
ENTRYPOINT ["/usr/local/bin/taskmaster"]
CMD ["serve"]
