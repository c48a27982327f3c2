# Sourced by scripts/test: the S3-compatible server the Spark reader's remote-store tests run
# on loopback (moto's standalone server mode, PyPI moto[server]), installed into .venv once.
# Quick on a second run: only an import check.
ensure_moto_server() {
    if ! "$VENV/bin/python" -c "import moto.server, flask" >/dev/null 2>&1; then
        echo "scripts/test: installing moto[server] (S3-compatible server for the Spark remote-store tests)" >&2
        "$VENV/bin/python" -m pip install -q --disable-pip-version-check "moto[server]>=5.1"
    fi
}
ensure_moto_server
