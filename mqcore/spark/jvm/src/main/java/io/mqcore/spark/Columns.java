package io.mqcore.spark;

import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * The 26 columns, in the order and with the types of the Python reader's schema
 * (mqcore/spark/decode.py COLUMNS): every field nullable, as Spark derives from that DDL.
 */
enum Columns {
    TOPIC("topic", DataTypes.StringType),
    QUEUE_ID("queue_id", DataTypes.IntegerType),
    QUEUE_OFFSET("queue_offset", DataTypes.LongType),
    COMMITLOG_OFFSET("commitlog_offset", DataTypes.LongType),
    STORE_SIZE("store_size", DataTypes.IntegerType),
    BODY("body", DataTypes.BinaryType),
    BODY_CRC("body_crc", DataTypes.IntegerType),
    FLAG("flag", DataTypes.IntegerType),
    SYS_FLAG("sys_flag", DataTypes.IntegerType),
    BORN_TIMESTAMP("born_timestamp", DataTypes.TimestampType),
    STORE_TIMESTAMP("store_timestamp", DataTypes.TimestampType),
    BORN_HOST("born_host", DataTypes.StringType),
    STORE_HOST("store_host", DataTypes.StringType),
    RECONSUME_TIMES("reconsume_times", DataTypes.IntegerType),
    PREPARED_TRANSACTION_OFFSET("prepared_transaction_offset", DataTypes.LongType),
    TAGS("tags", DataTypes.StringType),
    KEYS("keys", DataTypes.createArrayType(DataTypes.StringType, true)),
    MSG_ID("msg_id", DataTypes.StringType),
    OFFSET_MSG_ID("offset_msg_id", DataTypes.StringType),
    PROPERTIES("properties", DataTypes.createMapType(DataTypes.StringType, DataTypes.StringType, true)),
    IS_RETRY("is_retry", DataTypes.BooleanType),
    IS_DLQ("is_dlq", DataTypes.BooleanType),
    IS_DELAYED("is_delayed", DataTypes.BooleanType),
    ORIGINAL_TOPIC("original_topic", DataTypes.StringType),
    DELAY_LEVEL("delay_level", DataTypes.IntegerType),
    IS_COMPRESSED("is_compressed", DataTypes.BooleanType);

    final String column;
    final DataType type;

    Columns(String column, DataType type) {
        this.column = column;
        this.type = type;
    }

    /** Columns whose value comes from the properties: only they make the reader parse them. */
    boolean readsProperties() {
        return this == TAGS || this == KEYS || this == MSG_ID || this == PROPERTIES || this == ORIGINAL_TOPIC
                || this == DELAY_LEVEL;
    }

    static final StructType SCHEMA;

    static {
        StructField[] fields = new StructField[values().length];
        for (Columns c : values()) {
            fields[c.ordinal()] = DataTypes.createStructField(c.column, c.type, true);
        }
        SCHEMA = DataTypes.createStructType(fields);
    }

    static Columns named(String name) {
        for (Columns c : values()) {
            if (c.column.equals(name)) {
                return c;
            }
        }
        throw new IllegalArgumentException("no column " + name + " in format " + ReadOptions.FORMAT);
    }
}
