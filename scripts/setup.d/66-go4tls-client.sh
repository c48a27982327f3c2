# Sourced by scripts/test: the official Apache RocketMQ Go 4.x client (github.com/apache/rocketmq-client-go/v2)
# built into tests/reference/drivers/go4tls's driver, for the remoting port's TLS modes
# (tests/broker/test_tls.py: a plaintext Go client served in permissive mode, refused in enforcing
# mode). Modules come from the Go module proxy (versions pinned by the driver's go.mod/go.sum)
# into the usual module cache; the binary is cached under a hash of the driver's sources, so a
# second run only checks. Exports MQCORE_GO4TLS_DRIVER. Without Go or the proxy the suite stops
# here naming what is missing.
ensure_go4tls_driver() {
    local src=tests/reference/drivers/go4tls
    local cache=${XDG_CACHE_HOME:-$HOME/.cache}/mqcore/go4tls-driver
    if ! command -v go >/dev/null 2>&1; then
        echo "scripts/test: Go is not installed; the Go client TLS tests need it (https://go.dev/dl/)" >&2
        return 1
    fi
    local stamp
    stamp=$(cat "$src/go.mod" "$src/go.sum" "$src"/*.go | sha256sum | cut -c1-16)
    local bin="$cache/$stamp/go4tlsdriver"
    if [ ! -x "$bin" ]; then
        echo "scripts/test: building the Go TLS client driver ($src)" >&2
        mkdir -p "$cache/$stamp"
        if ! (cd "$src" && GOFLAGS=-mod=mod go build -o "$bin.tmp.$$" . ) >"$cache/$stamp/build.log" 2>&1; then
            echo "scripts/test: could not build $src (github.com/apache/rocketmq-client-go/v2 from the Go" >&2
            echo "  module proxy; see $cache/$stamp/build.log). The Go client TLS tests need it." >&2
            tail -5 "$cache/$stamp/build.log" >&2
            rm -f "$bin.tmp.$$"
            return 1
        fi
        mv "$bin.tmp.$$" "$bin"
    fi
    export MQCORE_GO4TLS_DRIVER="$bin"
}
ensure_go4tls_driver
