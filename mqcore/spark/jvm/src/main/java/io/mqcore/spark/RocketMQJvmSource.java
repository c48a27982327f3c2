package io.mqcore.spark;

import java.util.Map;

import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * {@code spark.read.format("rocketmq-jvm").load(storePath)}: the commitlog read inside the
 * JVM, handing Spark columnar batches, with the schema and values of the Python
 * {@code rocketmq} reader. It exists because the Python Data Source API's own transport
 * (Python worker, Arrow socket, JVM rows) costs more than a Parquet scan of the same rows.
 */
public final class RocketMQJvmSource implements TableProvider, DataSourceRegister {

    @Override
    public String shortName() {
        return ReadOptions.FORMAT;
    }

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        ReadOptions.parse(options);  // refuse unknown options at planning, not in a task
        return Columns.SCHEMA;
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        ReadOptions opts = ReadOptions.parse(properties);
        StoreSnapshot.locate(opts.path);  // a wrong path fails here with a clear message
        return new CommitLogTable(opts);
    }
}
