"""Fixtures of the Spark reader tests: generated stores and ONE shared SparkSession.

The session is session-scoped (JVM start ~4 s, first Python-worker query ~4 s): every
end-to-end test reuses it. Without Java the Spark tests are skipped locally, but fail
under CI=true, where an all-skipped run would look green while testing nothing.
"""
from __future__ import annotations

import os
import shutil
import sys

import pytest

from tests.support import storegen

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="session")
def built_store(tmp_path_factory):
    """A finished store: several topics, tags, keys, retries, DLQ, delayed, compressed, roll-overs.

    Returns (root, truth): truth maps commitlog offset -> (kind, MessageExt) as the store
    API reads the messages back.
    """
    root = str(tmp_path_factory.mktemp("store") / "store")
    truth = storegen.build(root, n=1200, file_size=32 * 1024)
    return root, truth


@pytest.fixture(scope="session")
def store_dir(built_store) -> str:
    return built_store[0]


@pytest.fixture(scope="session")
def store_truth(built_store) -> dict:
    return built_store[1]


_JVM_BUILD: dict = {"error": "the spark fixture did not run"}


@pytest.fixture(scope="session")
def jvm_reader(spark):
    """The shared session, with format("rocketmq-jvm") on its class path."""
    if _JVM_BUILD["error"] is not None:
        pytest.fail(f"the JVM reader's jar could not be built: {_JVM_BUILD['error']}")
    return spark


def _java_available() -> bool:
    return shutil.which("java") is not None or bool(os.environ.get("JAVA_HOME"))


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    if not _java_available():
        if os.environ.get("CI"):
            pytest.fail("Java 17+ not found (apt-get install -y openjdk-17-jre-headless): Spark tests cannot run")
        pytest.skip("Java not found: Spark tests skipped")
    if not os.environ.get("CI"):
        pytest.importorskip("pyspark")
    from pyspark.sql import SparkSession

    from mqcore.spark import jvm
    from mqcore.spark.source import register
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = PROJECT_ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")
    builder = (SparkSession.builder.master("local[2]").appName("mqcore-tests")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.sql.shuffle.partitions", "2").config("spark.default.parallelism", "2")
               .config("spark.sql.python.filterPushdown.enabled", "true")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.local.dir", str(tmp_path_factory.mktemp("spark-local")))
               .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("warehouse"))))
    # the JVM reader's jar goes in before the session starts; a failed build is kept and
    # fails the tests that need it (jvm_reader), not the whole Spark suite
    try:
        builder = jvm.with_jvm_reader(builder)
        _JVM_BUILD["error"] = None
    except Exception as e:  # noqa: BLE001 - reported by the jvm_reader fixture
        _JVM_BUILD["error"] = e
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()
