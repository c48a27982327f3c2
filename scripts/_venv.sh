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
    spark_uses_this_python "$VENV"
    local stamp
    stamp=$(cat scripts/_venv.sh pyproject.toml setup.py mqcore/*.pyx mqcore/*.pxd mqcore/*.pxi mqcore/*.h 2>/dev/null \
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
    # the first start (or one after the sources changed) builds and installs for minutes with
    # pip quiet: say so, or the console stays silent and the start looks hung
    echo "installing mqcore into $VENV (pip, then the Cython extensions are compiled): a first start takes" \
         "a few minutes; later starts skip this" >&2
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip setuptools wheel
    echo "building and installing mqcore${extras:+[$extras]} and its dependencies ..." >&2
    # editable: builds mqcore/_store*.so next to its sources, so the real extension is what runs.
    # compat mode puts this checkout on sys.path (a .pth line) instead of setuptools' import hook,
    # which tools that list modules by walking sys.path cannot see: mypy (mqcore.client) and
    # PySpark's lookup of pyspark_* data source modules (format("rocketmq") without register()).
    # setuptools greets every editable build with a boxed "Editable installation" warning that
    # says nothing to a user of this repository: filtered out (the build backend inherits it)
    # (compat mode's "transitional" notice too: strict mode would move the built extension out of
    # mqcore/, where the tests and `python setup.py build_ext --inplace` expect it)
    PYTHONWARNINGS="ignore:Editable installation:UserWarning,ignore:Compat editable installs${PYTHONWARNINGS:+,$PYTHONWARNINGS}" \
        "$VENV/bin/python" -m pip install -q --disable-pip-version-check \
        --config-settings editable_mode=compat -e ".${extras:+[$extras]}"
    echo "$want" > "$VENV/.mqcore-installed"
    echo "mqcore installed in $VENV" >&2
}

# Spark starts its Python workers (and its lookup of pyspark_* data sources) with $PYSPARK_PYTHON,
# else `python3` from the PATH: outside an activated venv that is the system's Python, without
# mqcore. A .pth line makes this venv's Python name itself when nothing else was chosen and it
# is not a driver started by spark-submit (which passes spark.pyspark.python its own way).
spark_uses_this_python() {
    local site
    site=$("$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    printf '%s\n' 'import os, sys; os.environ.get("PYSPARK_GATEWAY_PORT") or os.environ.setdefault("PYSPARK_PYTHON", sys.executable)' \
        > "$site/mqcore-spark-python.pth"
}
