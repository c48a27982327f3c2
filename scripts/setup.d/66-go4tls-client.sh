# Sourced by scripts/test: the official Apache RocketMQ Go 4.x client (github.com/apache/rocketmq-client-go/v2)
# built into tests/reference/drivers/go4tls's driver, for the remoting port's TLS modes
# (tests/broker/test_tls.py: a plaintext Go client served in permissive mode, refused in enforcing
# mode). Modules come from the Go module proxy (versions pinned by the driver's go.mod/go.sum)
# into the usual module cache; the binary is cached under a hash of the driver's sources, so a
# second run only checks. Exports MQCORE_GO4TLS_DRIVER. Without Go or the proxy the suite stops
# here naming what is missing.
ensure_go4tls_driver() {
    local bin
    bin=$(build_go_driver tests/reference/drivers/go4tls go4tls-driver) || return 1  # 65-go4-client.sh
    export MQCORE_GO4TLS_DRIVER="$bin"
}
ensure_go4tls_driver
