# Sourced by scripts/mqbroker and scripts/test: make .venv with mqcore built and installed.
# $1: pip extras to install (e.g. "test,spark"), empty for the runtime only.
# The install is skipped when nothing it depends on changed since the last one (a stamp of
# the packaging files, the Cython sources and the extras), so starting the broker is quick.
ensure_venv() {
    local extras="$1"
    PY=${PYTHON:-python3}
    VENV=${MQCORE_VENV:-.venv}
    if [ ! -x "$VENV/bin/python" ]; then
        "$PY" -m venv "$VENV"
    fi
    local stamp
    stamp=$(cat pyproject.toml setup.py mqcore/*.pyx mqcore/*.pxd mqcore/*.pxi mqcore/*.h 2>/dev/null \
            | sha256sum | cut -c1-16)
    local want="$stamp ${extras:-none}"
    local have=""
    [ -f "$VENV/.mqcore-installed" ] && have=$(cat "$VENV/.mqcore-installed")
    case " $have " in
        *" $stamp "*) ;;
        *) have="" ;;
    esac
    # installed with these sources and at least these extras: nothing to do
    if [ -n "$have" ] && { [ -z "$extras" ] || [[ "$have" == *"$extras"* ]]; } \
            && ls mqcore/_store*.so >/dev/null 2>&1; then
        return 0
    fi
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip setuptools wheel
    # editable: builds mqcore/_store*.so next to its sources, so the real extension is what runs.
    # setuptools greets every editable build with a boxed "Editable installation" warning that
    # says nothing to a user of this repository: filtered out (the build backend inherits it)
    PYTHONWARNINGS="ignore:Editable installation:UserWarning${PYTHONWARNINGS:+,$PYTHONWARNINGS}" \
        "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".${extras:+[$extras]}"
    echo "$want" > "$VENV/.mqcore-installed"
}
