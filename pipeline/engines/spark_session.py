"""A SparkSession configured so Spark reads and writes the warehouse exactly as DuckDB does.

What matters for identical numbers: UTC session time zone (day boundaries, timestamp rendering),
Parquet timestamps written as INT64 microseconds (DuckDB reads them as TIMESTAMPTZ; Spark's default
INT96 is a legacy type), zstd like the warehouse, and ANSI mode off so a division by zero is NULL
as in DuckDB (Spark 4 turns ANSI on by default). Local masters bind to 127.0.0.1 and run without
the UI; any other master URL is passed through untouched, and spark-defaults.conf still applies.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from pipeline.errors import UsageError

LOCAL_DRIVER_MEMORY = "2g"
SPARK_EXTRA_HINT = 'install the Spark extra: pip install -e ".[spark]" (needs Java 17+)'

_BASE_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.parquet.compression.codec": "zstd",
    "spark.sql.ansi.enabled": "false",
    "spark.sql.legacy.sizeOfNull": "false",  # size(NULL) is NULL, as len(NULL) in DuckDB
    # Constraint propagation is exponential in the number of aliased CASE/IF columns, and the
    # diagnosis views have many: planning cache_breaks ran out of heap with it on. It only
    # infers extra filters; results are the same without it.
    "spark.sql.constraintPropagation.enabled": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.log.structuredLogging.enabled": "false",
}

# Quiet driver logs: errors only. Spark replaces a config that looks like log4j's fallback (root at
# ERROR) by its own, so the root stays at WARN and the chatty namespaces are set to ERROR. The
# repl logger matches the root, else Spark prints a "Setting default log level" banner.
# Written to a temp file because log4j2 wants a path.
_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
logger.spark.name = org.apache.spark
logger.spark.level = error
logger.hadoop.name = org.apache.hadoop
logger.hadoop.level = error
logger.parquet.name = org.apache.parquet
logger.parquet.level = error
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = warn
"""


def is_local(master: str) -> bool:
    return master == "local" or master.startswith("local[")


def _log_config() -> str:
    path = Path(tempfile.gettempdir()) / "cacheaudit-spark-log4j2.properties"
    if not path.exists() or path.read_text() != _LOG4J2:
        path.write_text(_LOG4J2)
    return str(path)


def _require_java() -> None:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return
    if shutil.which("java") is None:
        raise UsageError(
            "the Spark engine needs Java and none was found",
            hint="install a JRE 17+ (Debian: apt-get install -y openjdk-17-jre-headless)"
            " or set JAVA_HOME",
        )


def session_conf(
    master: str, shuffle_partitions: int | None = None, java_options: str = ""
) -> dict[str, str]:
    conf = dict(_BASE_CONF)
    java_opts = f"-Dlog4j2.configurationFile=file:{_log_config()}"
    conf["spark.driver.extraJavaOptions"] = f"{java_opts} {java_options}".strip()
    if is_local(master):
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.driver.bindAddress"] = "127.0.0.1"
        # One machine: a few shuffle partitions, not Spark's 200.
        conf["spark.sql.shuffle.partitions"] = str(shuffle_partitions or 4)
        # Locally the driver JVM runs the tasks too: Spark's 1 GB default is tight for the
        # diagnosis views. SPARK_DRIVER_MEMORY (Spark's own variable) still decides when set.
        if not os.environ.get("SPARK_DRIVER_MEMORY"):
            conf["spark.driver.memory"] = LOCAL_DRIVER_MEMORY
    elif shuffle_partitions:
        conf["spark.sql.shuffle.partitions"] = str(shuffle_partitions)
    return conf


def get_session(
    master: str,
    *,
    app_name: str = "cacheaudit",
    shuffle_partitions: int | None = None,
    extra_conf: dict[str, str] | None = None,
    java_options: str = "",
) -> Any:
    """A SparkSession on `master` (created, or the active one reused with our settings).
    `java_options` are added to the driver JVM's options (next to the log configuration)."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise UsageError("pyspark is not installed", hint=SPARK_EXTRA_HINT) from None
    _require_java()
    if is_local(master):
        # Python workers must import this same `pipeline` package: use this interpreter.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.master(master).appName(app_name)
    conf = session_conf(master, shuffle_partitions, java_options)
    conf.update(extra_conf or {})
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    # A reused session keeps its static settings; the SQL ones can still be set now.
    for key, value in conf.items():
        if key.startswith("spark.sql.") and key != "spark.sql.execution.arrow.pyspark.enabled":
            spark.conf.set(key, value)
    _silence_python_query_loggers()
    return spark


def _silence_python_query_loggers() -> None:
    """pyspark 4 logs every failed query with its traceback before raising it; we raise it as a
    one-line QueryError instead, so the duplicate goes."""
    try:
        from pyspark.logger import PySparkLogger
    except ImportError:  # pyspark 3.5 has no such loggers
        return
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).disabled = True
