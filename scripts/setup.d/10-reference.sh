# Sourced by scripts/test: the Apache RocketMQ references (Java name server, broker, mqadmin and the
# official Java client of 4.9.7/4.9.8; name server, broker, proxy, mqadmin and the 5.x remoting
# client of 5.3.3), copied once from Maven Central into a cache that later runs reuse.
# Exports MQCORE_ROCKETMQ_SERVER_LIB, MQCORE_ROCKETMQ_CLIENT_LIB and MQCORE_ROCKETMQ5_LIB
# (directories of jars).
# Without Maven Central the suite stops here with a message naming what is missing: the
# reference tests are part of the suite and are never skipped silently.
ensure_rocketmq_reference() {
    local cache=${MQCORE_REFERENCE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mqcore/rocketmq}
    local server="$cache/server-4.9.7/lib" client="$cache/client-4.9.8/lib" server5="$cache/server-5.3.3/lib"
    if ! command -v mvn >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
        echo "scripts/test: installing Maven for the RocketMQ reference" >&2
        apt-get update -qq && apt-get install -y -qq --no-install-recommends maven >/dev/null
    fi
    local pom dir
    for pair in "server-pom.xml:$server" "client-pom.xml:$client" "server5-pom.xml:$server5"; do
        pom=${pair%%:*}; dir=${pair#*:}
        # the stamp is the pom itself: a changed pom refetches
        if [ -f "$dir/.pom" ] && cmp -s "$dir/.pom" "scripts/reference/$pom"; then
            continue
        fi
        # fetched beside the cache and renamed into place, so a run that reads the jars while
        # another (in a second checkout) refetches never sees a half-copied directory
        local tmp="$dir.tmp.$$"
        rm -rf "$tmp" && mkdir -p "$tmp"
        if ! mvn -q -B -f "scripts/reference/$pom" dependency:copy-dependencies \
                -DoutputDirectory="$tmp" >"$tmp.log" 2>&1; then
            echo "scripts/test: could not fetch the Apache RocketMQ reference jars from Maven Central" >&2
            echo "  (scripts/reference/$pom; see $tmp.log). The reference tests need them." >&2
            tail -5 "$tmp.log" >&2
            rm -rf "$tmp"
            return 1
        fi
        cp "scripts/reference/$pom" "$tmp/.pom"
        rm -f "$tmp.log"
        if [ -d "$dir" ]; then mv "$dir" "$dir.old.$$" && rm -rf "$dir.old.$$"; fi
        mv "$tmp" "$dir"
    done
    export MQCORE_ROCKETMQ_SERVER_LIB="$server" MQCORE_ROCKETMQ_CLIENT_LIB="$client" MQCORE_ROCKETMQ5_LIB="$server5"
}
ensure_rocketmq_reference
