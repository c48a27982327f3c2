# Sourced by scripts/test: the official RocketMQ 5.x Go client's driver (tests/grpc/drivers/go5,
# github.com/apache/rocketmq-clients/golang/v5 from the Go module proxy), built once into the
# cache, keyed by the driver's sources. Exports MQCORE_GO5_DRIVER (the binary).
ensure_go5_driver() {
    local src=tests/grpc/drivers/go5
    if ! command -v go >/dev/null 2>&1; then
        echo "scripts/test: Go is not installed: the Go 5.x client tests need it (tests/grpc/drivers/go5)" >&2
        return 1
    fi
    local key
    key=$(cat "$src/go.mod" "$src/go.sum" "$src/main.go" | sha256sum | cut -c1-16)
    local dir=${XDG_CACHE_HOME:-$HOME/.cache}/mqcore/go5-driver-$key
    if [ ! -x "$dir/go5driver" ]; then
        echo "scripts/test: building the Go 5.x client driver ($src)" >&2
        mkdir -p "$dir"
        if ! (cd "$src" && go build -o "$dir/go5driver" .) >"$dir/build.log" 2>&1; then
            echo "scripts/test: could not build $src (see $dir/build.log); the Go 5.x client tests need it" >&2
            tail -5 "$dir/build.log" >&2
            return 1
        fi
    fi
    export MQCORE_GO5_DRIVER="$dir/go5driver"
}
ensure_go5_driver
