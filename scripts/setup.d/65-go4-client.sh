# Sourced by scripts/test: the official Apache RocketMQ Go client (github.com/apache/rocketmq-client-go/v2,
# a 4.x remoting client) built into tests/reference/drivers/go4's driver, for the request-reply
# tests (tests/reference/test_go_request_reply.py). Modules come from the Go module proxy
# (GOPROXY as configured, GOFLAGS=-mod=mod, versions pinned by the driver's go.mod/go.sum) into
# the usual module cache; the binary is cached under a hash of the driver's sources, so a second
# run only checks. Exports MQCORE_GO4_DRIVER. Without Go or the proxy the suite stops here naming
# what is missing: the Go tests are part of the suite and are never skipped silently.
# build_go_driver SRC NAME: builds the Go module in SRC into the cache (under a hash of its
# sources) and prints the binary's path; 66-go4tls-client.sh builds its driver the same way.
build_go_driver() {
    local src=$1 name=$2
    local cache=${XDG_CACHE_HOME:-$HOME/.cache}/mqcore/$name
    if ! command -v go >/dev/null 2>&1; then
        echo "scripts/test: Go is not installed; the Go client tests need it (https://go.dev/dl/)" >&2
        return 1
    fi
    local stamp
    stamp=$(cat "$src/go.mod" "$src/go.sum" "$src"/*.go | sha256sum | cut -c1-16)
    local bin="$cache/$stamp/$name"
    if [ ! -x "$bin" ]; then
        echo "scripts/test: building the Go client driver ($src)" >&2
        mkdir -p "$cache/$stamp"
        if ! (cd "$src" && GOFLAGS=-mod=mod go build -o "$bin.tmp.$$" . ) >"$cache/$stamp/build.log" 2>&1; then
            echo "scripts/test: could not build $src (github.com/apache/rocketmq-client-go/v2 from the Go" >&2
            echo "  module proxy; see $cache/$stamp/build.log). The Go client tests need it." >&2
            tail -5 "$cache/$stamp/build.log" >&2
            rm -f "$bin.tmp.$$"
            return 1
        fi
        mv "$bin.tmp.$$" "$bin"
    fi
    echo "$bin"
}

ensure_go4_driver() {
    local bin
    bin=$(build_go_driver tests/reference/drivers/go4 go4-driver) || return 1
    export MQCORE_GO4_DRIVER="$bin"
}
ensure_go4_driver
