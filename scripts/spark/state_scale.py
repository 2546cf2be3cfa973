#!/usr/bin/env python3
"""Spark Structured Streaming's side of `sluice-bench state-scale` (local[2]).

The query, as Sluice's scenario runs it:

    rate-micro-batch (rowsPerBatch = ceil(K / 100), numPartitions = 8)
      -> groupBy(value % K).count()      update mode, RocksDB state store
      -> noop sink                        trigger: as fast as possible

K = --keys (10 M). Batch i holds the values [i * K/100, (i + 1) * K/100):
K/100 consecutive values, so K/100 distinct keys. The first 100 batches are
the fill (each inserts 1 % of the keys); the --touch-batches (40) after them
start at or above K, so their state already holds every key and each touches
1 % of it. Only those are measured: triggerExecution median and p99
(linear interpolation between ranks, as numpy's default and as Sluice's
`stats::Summary`), and addBatch (Spark's stateful part, the counterpart of
Sluice's reduce) beside. The Spark JVM's RSS (/proc/<pid>/status VmRSS,
sampled every 200 ms; local mode runs the executors in the driver JVM) is
reported as its peak, its last sample and VmHWM at the end.

The state's rows after the last batch (stateOperators numRowsTotal) must be
K; the script exits 1 otherwise, or when the query failed.

Prints EVENT lines (wall-clock timestamps) and one line
`SUMMARY {json}`; --result FILE appends the same JSON to FILE.

    export SPARK_LOCAL_IP=127.0.0.1 PATH="$PWD/target/peers-spark/.venv/bin:$PATH"
    python3 scripts/spark/state_scale.py --keys 10000000
"""
import argparse
import json
import os
import shutil
import sys
import threading
import time

T_PROC = time.time()

# The targets for Sluice, printed beside Spark's figures.
TARGET_BATCH_MEDIAN_MS = 300
TARGET_RSS_BYTES = 1 << 30
FILL_BATCHES = 100


def event(name, **kw):
    rec = {"event": name, "t": time.time(), "since_proc_start_s": round(time.time() - T_PROC, 3)}
    rec.update(kw)
    print("EVENT " + json.dumps(rec), flush=True)


def percentile(sorted_xs, p):
    """The p-th percentile (0..100) of an ascending list, linear between ranks."""
    if not sorted_xs:
        return None
    rank = p / 100.0 * (len(sorted_xs) - 1)
    lo, hi = int(rank), min(int(rank) + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (rank - lo)


def summary(xs):
    """count, min, mean, median, p99, max of a sample (None when empty)."""
    if not xs:
        return None
    s = sorted(xs)
    r3 = lambda v: round(v, 3)  # noqa: E731
    return {
        "count": len(s),
        "min": r3(s[0]),
        "mean": r3(sum(s) / len(s)),
        "median": r3(percentile(s, 50)),
        "p99": r3(percentile(s, 99)),
        "max": r3(s[-1]),
    }


def status_bytes(pid, field):
    """A kB field of /proc/<pid>/status (VmRSS, VmHWM) in bytes, or None."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


class RssSampler(threading.Thread):
    """Samples a process's VmRSS every `every` seconds until stopped."""

    def __init__(self, pid, every=0.2):
        super().__init__(daemon=True)
        self.pid, self.every = pid, every
        self.peak, self.last, self.samples = 0, None, 0
        self.stopped = threading.Event()

    def run(self):
        while not self.stopped.is_set():
            r = status_bytes(self.pid, "VmRSS")
            if r is not None:
                self.samples += 1
                self.peak = max(self.peak, r)
                self.last = r
            self.stopped.wait(self.every)

    def stop(self):
        self.stopped.set()
        self.join()


def state_op(p):
    """The first state operator of one progress event, or {}."""
    ops = p.get("stateOperators") or []
    return ops[0] if ops else {}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=10_000_000, help="distinct group keys K")
    ap.add_argument("--touch-batches", type=int, default=40,
                    help="batches after the fill, each touching 1%% of the keys (Sluice's --batches)")
    ap.add_argument("--num-partitions", type=int, default=8, help="the source's partitions (Sluice's --partitions)")
    ap.add_argument("--shuffle-partitions", type=int, default=8,
                    help="spark.sql.shuffle.partitions: Sluice's DEFAULT_STATE_PARTITIONS")
    ap.add_argument("--state-store", choices=["rocksdb", "hdfs"], default="rocksdb")
    ap.add_argument("--driver-memory", default="4g")
    ap.add_argument("--timeout", type=float, default=1800.0, help="give up after this many seconds of query time")
    ap.add_argument("--out", default="target/spark-state-scale", help="checkpoint under <out>/checkpoint (deleted first)")
    ap.add_argument("--result", default=None, help="also append the summary JSON line to this file")
    ap.add_argument("--tag", default="")
    a = ap.parse_args()
    if a.keys < FILL_BATCHES:
        ap.error(f"--keys must be at least {FILL_BATCHES}")
    if a.touch_batches < 1:
        ap.error("--touch-batches must be at least 1")

    step = -(-a.keys // FILL_BATCHES)
    fill = -(-a.keys // step)  # batches that start below K: 100 when K is a multiple of 100
    last_batch = fill + a.touch_batches - 1

    out = os.path.abspath(a.out)
    ckpt = os.path.join(out, "checkpoint")
    shutil.rmtree(ckpt, ignore_errors=True)
    os.makedirs(out, exist_ok=True)
    event("proc_start", pid=os.getpid())

    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    b = (SparkSession.builder.master("local[2]").appName("state-scale")
         .config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false")
         .config("spark.sql.shuffle.partitions", str(a.shuffle_partitions))
         .config("spark.driver.memory", a.driver_memory)
         .config("spark.sql.streaming.numRecentProgressUpdates", "100000")
         .config("spark.sql.adaptive.enabled", "false"))
    if a.state_store == "rocksdb":
        b = b.config("spark.sql.streaming.stateStore.providerClass",
                     "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    jvm_pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    sampler = RssSampler(jvm_pid)
    sampler.start()
    event("session_ready", spark_version=spark.version, jvm_pid=jvm_pid)

    src = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", step)
           .option("numPartitions", a.num_partitions).load())
    df = src.groupBy((F.col("value") % a.keys).alias("k")).count()
    q = (df.writeStream.format("noop").outputMode("update").option("checkpointLocation", ckpt)
         .trigger(processingTime="0 seconds").start())
    t_start = time.time()
    event("query_started", id=str(q.id))

    timed_out = False
    filled = False
    while True:
        if q.exception() is not None:
            break
        lp = q.lastProgress
        if lp is not None:
            if not filled and lp["batchId"] >= fill - 1:
                filled = True
                event("filled", batchId=lp["batchId"], jvm_rss_bytes=status_bytes(jvm_pid, "VmRSS"))
            if lp["batchId"] >= last_batch:
                break
        if time.time() - t_start > a.timeout:
            timed_out = True
            break
        time.sleep(0.1)
    t_done = time.time()
    exc = q.exception()
    q.stop()
    sampler.stop()
    hwm = status_bytes(jvm_pid, "VmHWM")
    event("query_stopped")

    prog = [json.loads(p.json) if hasattr(p, "json") else p for p in q.recentProgress]
    prog.sort(key=lambda p: p["batchId"])
    # A batch's first value: the rows of the batches before it.
    start, starts = 0, {}
    for p in prog:
        starts[p["batchId"]] = start
        start += p.get("numInputRows", 0)
    touch = [p for p in prog if p.get("numInputRows", 0) > 0 and starts[p["batchId"]] >= a.keys
             and p["batchId"] <= last_batch]
    te = [p["durationMs"].get("triggerExecution", 0) for p in touch]
    add = [p["durationMs"].get("addBatch", 0) for p in touch]
    phases = sorted({k for p in touch for k in p.get("durationMs", {})})
    last = prog[-1] if prog else {}
    op = state_op(last)
    state_rows = op.get("numRowsTotal")
    problems = []
    if exc:
        problems.append(f"the query failed: {exc}")
    if timed_out:
        problems.append(f"not done within --timeout {a.timeout} s")
    if len(touch) < a.touch_batches:
        problems.append(f"{len(touch)} of {a.touch_batches} touch batches measured")
    if state_rows != a.keys:
        problems.append(f"the state holds {state_rows} rows, not the {a.keys} keys")
    te_sum = summary(te)
    rss_peak = max([v for v in (sampler.peak, hwm) if v] or [0]) or None
    res = {
        "tag": a.tag,
        "scenario": "state-scale",
        "spark_version": spark.version,
        "master": "local[2]",
        "keys": a.keys,
        "rows_per_batch": step,
        "fill_batches": fill,
        "touch_batches": a.touch_batches,
        "num_partitions": a.num_partitions,
        "shuffle_partitions": a.shuffle_partitions,
        "state_store": a.state_store,
        "driver_memory": a.driver_memory,
        "trigger_s": 0,
        "startup_s": round(t_start - T_PROC, 3),
        "run_wall_s": round(t_done - t_start, 3),
        "batches": len(prog),
        "batch_ms": {
            "batches": len(touch),
            "first_batch": touch[0]["batchId"] if touch else None,
            "median_rows": percentile(sorted(p.get("numInputRows", 0) for p in touch), 50),
            "triggerExecution": te_sum,
            "addBatch": summary(add),
            "durationMs_median": {k: percentile(sorted(p["durationMs"].get(k, 0) for p in touch), 50)
                                  for k in phases},
        },
        "state_rows_last": state_rows,
        "state_memory_used_bytes_last": op.get("memoryUsedBytes"),
        "state_custom_metrics_last": op.get("customMetrics"),
        "jvm_rss_bytes": {
            "peak": rss_peak,
            "peak_sampled": sampler.peak or None,
            "last_sampled": sampler.last,
            "hwm": hwm,
            "samples": sampler.samples,
            "sample_ms": 200,
        },
        "targets": {"batch_median_ms": TARGET_BATCH_MEDIAN_MS, "rss_bytes": TARGET_RSS_BYTES},
        "met": {
            "batch_median_ms": te_sum["median"] < TARGET_BATCH_MEDIAN_MS if te_sum else None,
            "rss_bytes": rss_peak < TARGET_RSS_BYTES if rss_peak else None,
        },
        "ok": not problems,
        "problems": problems,
        "exception": str(exc) if exc else None,
        "per_batch": [[p["batchId"], starts[p["batchId"]], p.get("numInputRows", 0),
                       p["durationMs"].get("triggerExecution"), state_op(p).get("numRowsTotal")]
                      for p in prog],
    }
    line = json.dumps(res)
    print("SUMMARY " + line, flush=True)
    if a.result:
        with open(a.result, "a") as f:
            f.write(line + "\n")
    spark.stop()
    shutil.rmtree(ckpt, ignore_errors=True)
    event("exit")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
