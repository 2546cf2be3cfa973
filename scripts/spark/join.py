#!/usr/bin/env python3
"""Spark Structured Streaming reference for Sluice's stream-stream join (local[2]).

Workload `join`
  Two rate streams, a and b, each with rowsPerSecond=--rate and
  numPartitions=--num-partitions, each with withWatermark("timestamp",
  --watermark-delay), joined inner on

      a.value = b.value
      AND b.timestamp BETWEEN a.timestamp - INTERVAL <bound> SECONDS
                          AND a.timestamp + INTERVAL <bound> SECONDS

  selecting a.value, a.timestamp AS a_ts, b.timestamp AS b_ts, written to a
  Parquet file sink (append mode, checkpointed) with a processing-time trigger.

Runs the query for --duration seconds of wall time after query.start() (or
until --stop-file appears), stops it, reads the committed Parquet output back
with a Spark batch query, then prints one JSON summary line (prefixed
"SUMMARY ") computed from query.recentProgress. Event lines (prefixed
"EVENT ") carry wall-clock timestamps.

Both streams produce the same values 0, 1, 2, ... at the same rate from
nearly the same start time, so every value of a meets exactly one row of b,
a few milliseconds away in event time: the output holds each value once,
values 0..n-1 with n = the rows read by the stream that read fewer.
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import time

T_PROC = time.time()


def event(name, **kw):
    rec = {"event": name, "t": time.time(), "since_proc_start_s": round(time.time() - T_PROC, 3)}
    rec.update(kw)
    print("EVENT " + json.dumps(rec), flush=True)


def pct(xs, p):
    """Nearest-rank percentile (p in 0..100)."""
    if not xs:
        return None
    s = sorted(xs)
    k = max(0, min(len(s) - 1, int(round(p / 100.0 * len(s) + 0.5)) - 1))
    return s[k]


def med(xs):
    return statistics.median(xs) if xs else None


def source_rows(p):
    """numInputRows per source of one progress event, by source order (a, b)."""
    return [s.get("numInputRows", 0) for s in p.get("sources", [])]


def state_rows(p):
    """numRowsTotal summed over the state operators of one progress event (None without any)."""
    ops = p.get("stateOperators") or []
    return sum(o.get("numRowsTotal", 0) for o in ops) if ops else None


def summarize(progress, skip):
    """Summaries over all batches with data, and over 'steady' batches (first `skip` data batches dropped)."""
    data = [p for p in progress if p.get("numInputRows", 0) > 0]
    per_src = [source_rows(p) for p in progress]
    n_src = max((len(r) for r in per_src), default=0)
    out = {
        "progress_events": len(progress),
        "batches_with_data": len(data),
        "first_batch_id": progress[0]["batchId"] if progress else None,
        "last_batch_id": progress[-1]["batchId"] if progress else None,
        "total_input_rows": sum(p.get("numInputRows", 0) for p in progress),
        "input_rows_by_source": [sum(r[i] for r in per_src if len(r) > i) for i in range(n_src)],
    }

    def block(ps):
        te = [p["durationMs"].get("triggerExecution", 0) for p in ps]
        prs = [p.get("processedRowsPerSecond", 0.0) for p in ps]
        irs = [p.get("inputRowsPerSecond", 0.0) for p in ps]
        rows = [p.get("numInputRows", 0) for p in ps]
        keys = sorted({k for p in ps for k in p.get("durationMs", {})})
        d = {
            "batches": len(ps),
            "input_rows": sum(rows),
            "median_rows_per_batch": med(rows),
            "triggerExecution_ms_median": med(te),
            "triggerExecution_ms_p95": pct(te, 95),
            "triggerExecution_ms_max": max(te) if te else None,
            "processedRowsPerSecond_median": med(prs),
            "processedRowsPerSecond_p95": pct(prs, 95),
            "inputRowsPerSecond_median": med(irs),
            "durationMs_median": {k: med([p["durationMs"].get(k, 0) for p in ps]) for k in keys},
        }
        return d

    out["all"] = block(data)
    out["steady"] = block(data[skip:])

    # The join's state: both sides' buffered rows (numRowsTotal of the join operator).
    srows = [(p["batchId"], state_rows(p)) for p in progress if state_rows(p) is not None]
    ops_last = (progress[-1].get("stateOperators") or []) if progress else []
    mem = [sum(o.get("memoryUsedBytes", 0) for o in (p.get("stateOperators") or [])) for p in progress]
    out["state"] = {
        "operators": [o.get("operatorName") for o in ops_last],
        "numRowsTotal_last": srows[-1][1] if srows else None,
        "numRowsTotal_max": max(r for _, r in srows) if srows else None,
        "numRowsTotal_max_batch": max(srows, key=lambda x: x[1])[0] if srows else None,
        "numRowsTotal_steady_median": med([r for _, r in srows[skip:]]),
        "memoryUsedBytes_last": mem[-1] if mem else None,
        "memoryUsedBytes_max": max(mem) if mem else None,
        "numRowsDroppedByWatermark_total": sum(
            o.get("numRowsDroppedByWatermark", 0) for p in progress for o in (p.get("stateOperators") or [])),
    }
    last = progress[-1] if progress else {}
    out["last_event_time"] = last.get("eventTime")
    # the join operator's own figures at the last batch (update/removal/commit
    # times are summed over its tasks; customMetrics are the state store's)
    out["state_operator_last"] = ops_last[0] if ops_last else None
    return out


def count_output(spark, sink):
    """Rows of the committed Parquet output (the file sink's _spark_metadata log decides what is committed)."""
    from pyspark.sql import functions as F
    if not os.path.isdir(os.path.join(sink, "_spark_metadata")):
        return {"output_rows": 0}
    df = spark.read.parquet(sink)
    r = df.agg(
        F.count(F.lit(1)).alias("rows"),
        F.countDistinct("value").alias("distinct_values"),
        F.min("value").alias("min_value"),
        F.max("value").alias("max_value"),
        F.max(F.abs(F.col("a_ts").cast("double") - F.col("b_ts").cast("double"))).alias("max_abs_ts_diff_s"),
    ).collect()[0]
    files = [f for f in os.listdir(sink) if f.endswith(".parquet")]
    return {
        "output_rows": r["rows"],
        "output_distinct_values": r["distinct_values"],
        "output_min_value": r["min_value"],
        "output_max_value": r["max_value"],
        "output_max_abs_ts_diff_ms": None if r["max_abs_ts_diff_s"] is None else round(r["max_abs_ts_diff_s"] * 1000, 3),
        "output_files": len(files),
        "output_bytes": sum(os.path.getsize(os.path.join(sink, f)) for f in files),
    }


def check_output(o, rows_by_source):
    """Each value of a meets exactly one row of b: values 0..n-1, each once, n = the smaller stream's rows.

    The sink can hold one batch more than the progress reports (a batch whose
    files were committed when the query was stopped, before its progress event),
    so n may exceed the smaller stream's rows by at most one batch; never less.
    """
    n = o.get("output_rows", 0)
    expect = min(rows_by_source) if len(rows_by_source) == 2 else None
    problems = []
    if n:
        if o["output_distinct_values"] != n:
            problems.append("a value appears more than once")
        if o["output_min_value"] != 0 or o["output_max_value"] != n - 1:
            problems.append("values are not exactly 0..n-1")
    if expect is None:
        problems.append("progress has no per-source row counts")
    elif n < expect:
        problems.append(f"{expect - n} rows missing against min(a rows, b rows) = {expect}")
    return {"expected_rows_from_progress": expect,
            "output_minus_expected": None if expect is None else n - expect,
            "output_ok": not problems, "output_problems": problems}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=int, default=100_000, help="rowsPerSecond of each of the two rate streams")
    ap.add_argument("--num-partitions", type=int, default=2, help="numPartitions of each rate stream")
    ap.add_argument("--watermark-delay", type=float, default=5.0, help="withWatermark delay in seconds, on both streams")
    ap.add_argument("--bound", type=float, default=5.0,
                    help="event-time bound in seconds: b.timestamp within a.timestamp +- bound")
    ap.add_argument("--trigger", type=float, default=1.0, help="processingTime trigger in seconds (0 = as fast as possible)")
    ap.add_argument("--duration", type=float, default=45.0, help="wall seconds to run after query.start()")
    ap.add_argument("--stop-file", default=None, help="stop as soon as this file exists")
    ap.add_argument("--out", default="target/spark-join/run", help="run dir: <out>/sink (Parquet) and <out>/checkpoint")
    ap.add_argument("--clean", action="store_true", help="delete <out> before starting (fresh checkpoint)")
    ap.add_argument("--state-store", choices=["hdfs", "rocksdb"], default="hdfs")
    ap.add_argument("--shuffle-partitions", type=int, default=8, help="partitions of the join (and of its state)")
    ap.add_argument("--driver-memory", default="4g")
    ap.add_argument("--skip", type=int, default=15,
                    help="data batches excluded from the 'steady' summary (JIT warm-up, state filling up)")
    ap.add_argument("--result", default=None, help="also append the summary JSON line to this file")
    ap.add_argument("--tag", default="")
    ap.add_argument("--drop-output", action="store_true", help="delete the Parquet sink after counting it")
    a = ap.parse_args()

    out = os.path.abspath(a.out)
    if a.clean and os.path.exists(out):
        shutil.rmtree(out)
    sink = os.path.join(out, "sink")
    ckpt = os.path.join(out, "checkpoint")
    os.makedirs(out, exist_ok=True)
    event("proc_start", pid=os.getpid(), pgid=os.getpgid(0))

    from pyspark.sql import SparkSession

    b = (SparkSession.builder.master("local[2]").appName("bench-join")
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
    event("session_ready", spark_version=spark.version)

    def fmt_s(x):
        return f"{int(x)}" if float(x).is_integer() else f"{x}"

    delay = f"{fmt_s(a.watermark_delay)} seconds"
    for name in ("a", "b"):
        (spark.readStream.format("rate").option("rowsPerSecond", a.rate)
         .option("numPartitions", a.num_partitions).load()
         .withWatermark("timestamp", delay)
         .createOrReplaceTempView(name))
    bound = fmt_s(a.bound)
    sql = ("SELECT a.value, a.timestamp AS a_ts, b.timestamp AS b_ts FROM a JOIN b "
           f"ON a.value = b.value AND b.timestamp BETWEEN a.timestamp - INTERVAL {bound} SECONDS "
           f"AND a.timestamp + INTERVAL {bound} SECONDS")
    df = spark.sql(sql)

    trig = f"{a.trigger} seconds" if a.trigger > 0 else "0 seconds"
    q = (df.writeStream.format("parquet").option("path", sink)
         .option("checkpointLocation", ckpt).outputMode("append")
         .trigger(processingTime=trig).start())
    t_start = time.time()
    event("query_started", id=str(q.id), runId=str(q.runId))

    deadline = t_start + a.duration
    first_reported = False
    while time.time() < deadline:
        if a.stop_file and os.path.exists(a.stop_file):
            break
        if q.exception() is not None:
            break
        if not first_reported and q.lastProgress is not None:
            event("first_progress", batchId=q.lastProgress["batchId"])
            first_reported = True
        time.sleep(0.1)
    t_stop_req = time.time()
    exc = q.exception()
    q.stop()
    t_stopped = time.time()
    event("query_stopped", stop_s=round(t_stopped - t_stop_req, 3))

    prog = [json.loads(p.json) if hasattr(p, "json") else p for p in q.recentProgress]
    res = {
        "tag": a.tag,
        "workload": "join",
        "source": "rate",
        "rate": a.rate,
        "num_partitions": a.num_partitions,
        "watermark_delay": delay,
        "bound_s": a.bound,
        "trigger_s": a.trigger,
        "state_store": a.state_store,
        "shuffle_partitions": a.shuffle_partitions,
        "sql": sql,
        "run_wall_s": round(t_stop_req - t_start, 3),
        "startup_s": round(t_start - T_PROC, 3),
        "spark_version": spark.version,
        "exception": str(exc) if exc else None,
    }
    res.update(summarize(prog, a.skip))
    res["warmup_batches_skipped"] = a.skip
    res["per_batch"] = [[p["batchId"], p.get("numInputRows", 0), p["durationMs"].get("triggerExecution"),
                         state_rows(p), p.get("timestamp")] for p in prog]  # timestamp = trigger start (UTC ISO)

    t0 = time.time()
    res.update(count_output(spark, sink))
    res["output_count_s"] = round(time.time() - t0, 3)
    res.update(check_output(res, res["input_rows_by_source"]))

    # sustainability verdict: every steady batch finished within the trigger
    # interval (p95) and processed rows/s kept up with both streams together
    # (2 x rate). A run too slow to reach --skip data batches is judged on its
    # data batches after the first (which holds the startup backlog).
    st, basis = res["steady"], "steady"
    if st["batches"] == 0 and res["all"]["batches"] > 1:
        st, basis = summarize(prog, 1)["steady"], "all_but_first"
    if a.trigger > 0 and st["batches"]:
        res["sustained"] = bool(st["triggerExecution_ms_p95"] <= a.trigger * 1000
                                and st["processedRowsPerSecond_median"] >= 2 * a.rate)
        res["sustained_basis"] = basis
    elif a.trigger > 0 and res["all"]["batches"]:
        res["sustained"] = bool(res["all"]["triggerExecution_ms_max"] <= a.trigger * 1000)
        res["sustained_basis"] = "only_batch"
    line = json.dumps(res)
    print("SUMMARY " + line, flush=True)
    if a.result:
        with open(a.result, "a") as f:
            f.write(line + "\n")
    spark.stop()
    if a.drop_output and os.path.exists(sink):
        shutil.rmtree(sink, ignore_errors=True)
    event("exit")


if __name__ == "__main__":
    sys.exit(main())
