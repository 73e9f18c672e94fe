package cdcview.peer;

import java.util.concurrent.atomic.AtomicLongArray;
import java.util.concurrent.atomic.LongAdder;

/**
 * Wall time when a store update made a change visible minus the Kafka timestamp of the change
 * event (set by the producer): the same measure as cdcview's cdcview_replication_lag_seconds,
 * taken where a view or aggregate store is written (a KeyQuery sees the value from then on; a
 * RangeQuery reads RocksDB under the record cache and sees it once the cache is flushed, at the
 * task's next commit). Buckets in seconds, as a Prometheus histogram.
 */
final class Lag {
  static final double[] BOUNDS = {0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03,
      0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 7.5, 10, 20, 60};
  private final AtomicLongArray counts = new AtomicLongArray(BOUNDS.length + 1);
  private final LongAdder sumMillis = new LongAdder();

  void record(long eventTimestampMs) {
    long ms = Math.max(0, System.currentTimeMillis() - eventTimestampMs);
    double s = ms / 1000.0;
    int i = 0;
    while (i < BOUNDS.length && s > BOUNDS[i]) {
      i++;
    }
    counts.incrementAndGet(i);
    sumMillis.add(ms);
  }

  /** {"buckets": [[upper bound s or "+Inf", cumulative count], ...], "sum_seconds": x}. */
  String json() {
    StringBuilder sb = new StringBuilder("{\"buckets\":[");
    long cumulative = 0;
    for (int i = 0; i <= BOUNDS.length; i++) {
      cumulative += counts.get(i);
      if (i > 0) {
        sb.append(',');
      }
      sb.append('[').append(i < BOUNDS.length ? Double.toString(BOUNDS[i]) : "\"+Inf\"")
          .append(',').append(cumulative).append(']');
    }
    return sb.append("],\"sum_seconds\":").append(sumMillis.sum() / 1000.0).append('}').toString();
  }
}
