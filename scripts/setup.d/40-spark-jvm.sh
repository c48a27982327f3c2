# Sourced by scripts/test: the Spark reader's JVM half (format "rocketmq-jvm") compiled once
# into ~/.cache/mqcore/spark-jvm (mqcore.spark.jvm.jar_path; reused while its sources and the
# pyspark jars are unchanged). It needs javac: without a JDK it is installed here, as the
# Spark tests of that reader are part of the suite and are never skipped.
ensure_spark_jvm_jar() {
    if ! command -v javac >/dev/null 2>&1 && [ ! -x "${JAVA_HOME:-/nonexistent}/bin/javac" ] \
            && command -v apt-get >/dev/null 2>&1; then
        echo "scripts/test: installing a JDK (javac) for the Spark JVM reader" >&2
        apt-get update -qq && apt-get install -y -qq --no-install-recommends openjdk-17-jdk-headless >/dev/null
    fi
    "$VENV/bin/python" -c "from mqcore.spark import jvm; jvm.jar_path()"
}
ensure_spark_jvm_jar
