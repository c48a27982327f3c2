# Sourced by scripts/mqbroker and scripts/test: make .venv with mqcore built and installed.
# $1: pip extras to install (e.g. "test,spark"), empty for the runtime only.
ensure_venv() {
    local extras="$1"
    PY=${PYTHON:-python3}
    VENV=${MQCORE_VENV:-.venv}
    if [ ! -x "$VENV/bin/python" ]; then
        "$PY" -m venv "$VENV"
    fi
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip setuptools wheel
    # editable: builds mqcore/_store*.so next to its sources, so the real extension is what runs
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".${extras:+[$extras]}"
}
