# Sourced by scripts/test: what the RocketMQ 5.x gRPC endpoint's tests need. Quick on a second run.
#  - the endpoint's optional extra (mqcore[grpc]: grpcio, protobuf, rocketmq-python-client) in .venv;
#  - the official Python 5.x client in a venv of its own (.venv-grpc-client), run as a separate
#    process like the C++ client: it pulls OpenTelemetry and owns the top-level name `rocketmq`;
#  - the official Node.js 5.x client (npm rocketmq-client-nodejs) in a scratch directory in the cache.
# Exports MQCORE_GRPC_PY_CLIENT (that venv's python) and MQCORE_GRPC_NODE_CLIENT_DIR.
ensure_grpc_pieces() {
    local py_client_version=5.1.2 node_client_version=1.0.8
    if ! "$VENV/bin/python" -c "import grpc, google.protobuf, importlib.metadata as m; m.distribution('rocketmq-python-client')" \
            >/dev/null 2>&1; then
        echo "scripts/test: installing mqcore[grpc] (the gRPC endpoint's extra)" >&2
        local reqs
        reqs=$("$VENV/bin/python" -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["grpc"]))')
        # shellcheck disable=SC2086
        "$VENV/bin/python" -m pip install -q --disable-pip-version-check $reqs
    fi
    local client_venv=${MQCORE_GRPC_CLIENT_VENV:-.venv-grpc-client}
    if [ ! -x "$client_venv/bin/python" ]; then
        "$PY" -m venv "$client_venv"
    fi
    if ! "$client_venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('rocketmq-python-client') != '$py_client_version')" \
            >/dev/null 2>&1; then
        echo "scripts/test: installing the official Python 5.x client (rocketmq-python-client $py_client_version)" >&2
        "$client_venv/bin/python" -m pip install -q --disable-pip-version-check "rocketmq-python-client==$py_client_version"
    fi
    export MQCORE_GRPC_PY_CLIENT="$PWD/$client_venv/bin/python"

    if ! command -v npm >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
        echo "scripts/test: installing Node.js for the Node.js 5.x client" >&2
        apt-get update -qq && apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
    fi
    local node_dir=${MQCORE_GRPC_NODE_CLIENT_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mqcore/node-grpc-client-$node_client_version}
    if [ ! -f "$node_dir/node_modules/rocketmq-client-nodejs/package.json" ]; then
        echo "scripts/test: installing the official Node.js 5.x client (rocketmq-client-nodejs $node_client_version)" >&2
        mkdir -p "$node_dir"
        (cd "$node_dir" && npm install --no-audit --no-fund --silent "rocketmq-client-nodejs@$node_client_version" >/dev/null)
    fi
    export MQCORE_GRPC_NODE_CLIENT_DIR="$node_dir"
}
ensure_grpc_pieces

# The official Java 5.x client (rocketmq-client-java, one shaded jar), copied once from Maven
# Central into the cache next to the 4.x reference (10-reference.sh installed Java and Maven).
# Exports MQCORE_GRPC_JAVA_CLIENT_LIB (a directory of jars).
ensure_grpc_java_client() {
    local pom=scripts/grpc/java5-client-pom.xml
    local dir=${XDG_CACHE_HOME:-$HOME/.cache}/mqcore/java5-client/lib
    if ! { [ -f "$dir/.pom" ] && cmp -s "$dir/.pom" "$pom"; }; then
        rm -rf "$dir" && mkdir -p "$dir"
        if ! mvn -q -B -f "$pom" dependency:copy-dependencies -DoutputDirectory="$dir" >"$dir/../fetch.log" 2>&1; then
            echo "scripts/test: could not fetch the RocketMQ 5.x Java client from Maven Central ($pom;" >&2
            echo "  see $dir/../fetch.log). The gRPC endpoint's Java client test needs it." >&2
            tail -5 "$dir/../fetch.log" >&2
            return 1
        fi
        cp "$pom" "$dir/.pom"
    fi
    export MQCORE_GRPC_JAVA_CLIENT_LIB="$dir"
}
ensure_grpc_java_client
