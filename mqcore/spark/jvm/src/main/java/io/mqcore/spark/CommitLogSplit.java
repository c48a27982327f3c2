package io.mqcore.spark;

import org.apache.spark.sql.connector.read.InputPartition;

/**
 * One task's work: the records whose first byte lies in [start, stop) of one commitlog file
 * (Hadoop semantics); the last one may run on up to {@code limit}, the file's end of data in
 * the snapshot. A split that does not start at a known record boundary ({@code aligned}
 * false) first resyncs on MAGIC + PHYSICALOFFSET, and the split before it finishes the
 * record that straddles the boundary, so every record is read exactly once.
 */
final class CommitLogSplit implements InputPartition {
    private static final long serialVersionUID = 1L;

    final String path;
    final long baseOffset;
    final long start;
    final long stop;
    final long limit;
    final boolean aligned;

    CommitLogSplit(String path, long baseOffset, long start, long stop, long limit, boolean aligned) {
        this.path = path;
        this.baseOffset = baseOffset;
        this.start = start;
        this.stop = stop;
        this.limit = limit;
        this.aligned = aligned;
    }

    @Override
    public String toString() {
        return path + "[" + start + ", " + stop + ") limit " + limit + (aligned ? "" : " (resync)");
    }
}
