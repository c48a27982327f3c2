# Sourced by scripts/test: what the power-loss test (tests/store/test_power_loss.py) mounts its
# store on: Debian's fuse3 (fusermount3 and libfuse3, which the PyPI binding mfusepy loads with
# ctypes) and /dev/fuse. Quick on a second run: only checks.
ensure_fuse() {
    if ! command -v fusermount3 >/dev/null 2>&1 || ! ldconfig -p | grep -q 'libfuse3\.so'; then
        echo "scripts/test: installing fuse3 (the power-loss test's file system)" >&2
        apt-get update -qq && apt-get install -y -qq --no-install-recommends fuse3 libfuse3-3 >/dev/null
    fi
    if [ ! -e /dev/fuse ]; then
        mknod -m 666 /dev/fuse c 10 229 2>/dev/null || echo "scripts/test: no /dev/fuse; the power-loss test will fail" >&2
    fi
    if ! "$VENV/bin/python" -c "import mfusepy" >/dev/null 2>&1; then
        "$VENV/bin/python" -m pip install -q --disable-pip-version-check "mfusepy>=3.1"
    fi
}
ensure_fuse
