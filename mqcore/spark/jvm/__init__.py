"""The JVM half of the Spark reader: ``format("rocketmq-jvm")``, a DataSource V2 in Java.

The Python ``rocketmq`` source cannot beat a Parquet scan however fast it decodes: a
Python data source that only re-sends one prebuilt Arrow batch is already slower than
Parquet (bench/README.md, "Spark reader"). The Java reader under ``src/main/java`` decodes
the commitlog inside the executor JVM into Spark's column vectors, with the same schema,
values and snapshot rules.

It ships as sources and is compiled on first use, against the jars of the installed
pyspark, into a cache directory (no Maven, no new dependencies)::

    from pyspark.sql import SparkSession
    from mqcore.spark import jvm
    spark = jvm.with_jvm_reader(SparkSession.builder.master("local[2]")).getOrCreate()
    df = spark.read.format("rocketmq-jvm").load("/data/rocketmq/store")

``jar_path()`` alone gives the jar, e.g. for ``spark-submit --jars``.
"""
from __future__ import annotations

import glob
import hashlib
import os
import shutil
import subprocess
import tempfile
import zipfile
from typing import TYPE_CHECKING

from mqcore.errors import ConfigError

if TYPE_CHECKING:  # pyspark is imported by the caller that builds a session
    from pyspark.sql import SparkSession

FORMAT = "rocketmq-jvm"
_HERE = os.path.dirname(os.path.abspath(__file__))
SOURCES = os.path.join(_HERE, "src", "main", "java")
RESOURCES = os.path.join(_HERE, "src", "main", "resources")
JAR_NAME = "mqcore-spark-jvm.jar"
_INSTALL_JDK = ("the JVM reader is compiled on first use and needs a JDK 17+ with javac "
                "(e.g. apt-get install -y openjdk-17-jdk-headless), or JAVA_HOME pointing at one")


def _source_files() -> list[str]:
    found = []
    for base in (SOURCES, RESOURCES):
        for dirpath, _dirs, names in os.walk(base):
            found += [os.path.join(dirpath, n) for n in names]
    return sorted(found)


def spark_jars_dir() -> str:
    """The directory of the jars Spark runs with: pyspark's own, else ``$SPARK_HOME/jars``."""
    try:
        import pyspark
        here = os.path.join(os.path.dirname(pyspark.__file__), "jars")
        if os.path.isdir(here):
            return here
    except ImportError:
        pass
    home = os.environ.get("SPARK_HOME")
    if home and os.path.isdir(os.path.join(home, "jars")):
        return os.path.join(home, "jars")
    raise ConfigError("no Spark jars found: install pyspark (pip install 'mqcore[spark]') or set SPARK_HOME")


def javac() -> str:
    """The javac to compile with: ``$JAVA_HOME/bin/javac``, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "javac"), os.X_OK):
        return os.path.join(home, "bin", "javac")
    found = shutil.which("javac")
    if not found:
        raise ConfigError(f"javac not found: {_INSTALL_JDK}")
    return found


def cache_dir() -> str:
    """Where built jars are kept: ``$MQCORE_CACHE_DIR``, else ``$XDG_CACHE_HOME/mqcore`` (~/.cache)."""
    base = os.environ.get("MQCORE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "mqcore")
    return os.path.join(base, "spark-jvm")


def _fingerprint(jars: str) -> str:
    """Sources and the Spark jars they compile against: a change in either is a new jar."""
    h = hashlib.sha256()
    for path in _source_files():
        h.update(os.path.relpath(path, _HERE).encode())
        with open(path, "rb") as f:
            h.update(f.read())
    for jar in sorted(glob.glob(os.path.join(jars, "spark-*.jar"))):
        h.update(os.path.basename(jar).encode())
    return h.hexdigest()[:16]


def jar_path(rebuild: bool = False) -> str:
    """The reader's jar, compiled on first use into ``cache_dir()`` (~10 s) and reused after."""
    jars = spark_jars_dir()
    target = os.path.join(cache_dir(), _fingerprint(jars), JAR_NAME)
    if os.path.exists(target) and not rebuild:
        return target
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with tempfile.TemporaryDirectory(dir=os.path.dirname(target)) as work:
        classes = os.path.join(work, "classes")
        sources = [p for p in _source_files() if p.endswith(".java")]
        cmd = [javac(), "--release", "17", "-nowarn", "-encoding", "UTF-8", "-cp", os.path.join(jars, "*"),
               "-d", classes, *sources]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise ConfigError(f"compiling the JVM reader failed ({' '.join(cmd[:2])} ...):\n{done.stderr[-4000:]}")
        partial = os.path.join(work, JAR_NAME)
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nCreated-By: mqcore\n\n")
            for root in (classes, RESOURCES):
                for dirpath, _dirs, names in os.walk(root):
                    for n in sorted(names):
                        p = os.path.join(dirpath, n)
                        z.write(p, os.path.relpath(p, root))
        os.replace(partial, target)  # atomic: a concurrent build just replaces an identical jar
    return target


def with_jvm_reader(builder: SparkSession.Builder) -> SparkSession.Builder:
    """``builder`` with the reader's jar added to ``spark.jars`` (set before the session starts)."""
    jar = jar_path()
    options = getattr(builder, "_options", {})
    current = options.get("spark.jars", "")
    jars = ",".join(j for j in (current, jar) if j)
    return builder.config("spark.jars", jars)
