# Sourced by scripts/test: Apache RocketMQ 5.3.3, the 5.x reference (name server, broker, proxy,
# mqadmin and the 5.x remoting client), copied once from Maven Central into the cache beside the
# 4.x reference (10-reference.sh installed Maven). Exports MQCORE_ROCKETMQ5_LIB (a directory of jars).
# Without Maven Central the suite stops here naming what is missing: never skipped silently.
ensure_rocketmq5_reference() {
    local cache=${MQCORE_REFERENCE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mqcore/rocketmq}
    local dir="$cache/server-5.3.3/lib" pom=scripts/reference/server5-pom.xml
    if ! { [ -f "$dir/.pom" ] && cmp -s "$dir/.pom" "$pom"; }; then
        # fetched beside the cache and renamed into place (see 10-reference.sh)
        local tmp="$dir.tmp.$$"
        rm -rf "$tmp" && mkdir -p "$tmp"
        if ! mvn -q -B -f "$pom" dependency:copy-dependencies -DoutputDirectory="$tmp" >"$tmp.log" 2>&1; then
            echo "scripts/test: could not fetch Apache RocketMQ 5.3.3 from Maven Central ($pom;" >&2
            echo "  see $tmp.log). The 5.x reference tests need it." >&2
            tail -5 "$tmp.log" >&2
            rm -rf "$tmp"
            return 1
        fi
        cp "$pom" "$tmp/.pom"
        rm -f "$tmp.log"
        if [ -d "$dir" ]; then mv "$dir" "$dir.old.$$" && rm -rf "$dir.old.$$"; fi
        mv "$tmp" "$dir"
    fi
    export MQCORE_ROCKETMQ5_LIB="$dir"
}
ensure_rocketmq5_reference
