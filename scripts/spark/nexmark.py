#!/usr/bin/env python3
"""Spark Structured Streaming reference for Sluice's Nexmark q0, q1, q2, q17 (local[2]).

Reads the Nexmark `bid` table from the files written by
`sluice nexmark generate --table bid --format parquet|jsonl` as a stream
(the file source, spark.readStream.schema(...).parquet(dir) or .json(dir),
--format, --max-files-per-trigger files a batch, default 2), registers it as
the temp view `bid`, runs one query (--query) into the noop sink (Spark's
blackhole) with the default trigger (the next micro-batch as soon as the
last one ends), and stops once every file has been processed
(query.processAllAvailable()).

  q0   SELECT auction, bidder, price, date_time, extra FROM bid
  q1   SELECT auction, bidder, 0.908 * price AS price, date_time, extra FROM bid
  q2   SELECT auction, price FROM bid WHERE auction % 123 = 0
  q17  per (auction, day): bid counts in three price ranges, min, max, avg,
       sum of the price; update mode, the groups in Spark's state store

The query runs --passes times (default 2) in the same JVM and SparkSession,
each pass a fresh stream over the same files with a fresh checkpoint: the
first pass runs on a cold JVM (class loading, code generation, JIT), the
last on a warm one. The SUMMARY's headline figures are the last pass's;
"passes" lists every pass.

The key figure is the CPU seconds of the Spark JVM over a pass:
utime + stime of /proc/<jvm pid>/stat, sampled right before query.start()
and right after processAllAvailable() returns. events_per_second_per_core
= --events / those CPU seconds.

After the passes, batch queries over the same files check every pass: the
rows the stream read (the sum of numInputRows) must equal the files' row
count, and the query's result must match the same SQL run as a batch query
(q0-q2: the rows the sink got; q17: the groups in the state at the end);
otherwise the script exits with status 1 (after printing the SUMMARY, with
the reasons in "problems").

jsonl files hold date_time as epoch milliseconds (a JSON integer, the
instant in UTC); the script reads it as bigint and turns it into the
timestamp_ntz Parquet files give, timestampadd(MILLISECOND, date_time,
TIMESTAMP_NTZ'1970-01-01 00:00:00'), independent of the session time zone.

Prints "EVENT " lines with wall-clock timestamps and one "SUMMARY " JSON
line; --result appends the same JSON to a file. One query per run, in a
fresh JVM; <out>/checkpoint is deleted before each pass.
"""
import argparse
import datetime
import json
import os
import shutil
import statistics
import sys
import time

T_PROC = time.time()

QUERIES = {
    "q0": "SELECT auction, bidder, price, date_time, extra FROM bid",
    "q1": "SELECT auction, bidder, 0.908 * price AS price, date_time, extra FROM bid",
    "q2": "SELECT auction, price FROM bid WHERE auction % 123 = 0",
    "q17": ("SELECT auction, date_format(date_time, 'yyyy-MM-dd') AS day, count(*) AS total_bids, "
            "count(*) FILTER (WHERE price < 10000) AS rank1_bids, "
            "count(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids, "
            "count(*) FILTER (WHERE price >= 1000000) AS rank3_bids, "
            "min(price) AS min_price, max(price) AS max_price, avg(price) AS avg_price, "
            "sum(price) AS sum_price "
            "FROM bid GROUP BY auction, date_format(date_time, 'yyyy-MM-dd')"),
}
UPDATE_MODE = {"q17"}

# Nexmark's event mix: of every 50 events, 1 person, 3 auctions, 46 bids.
BID_SHARE = 46 / 50


def summary(res, result):
    """Prints the SUMMARY line of `res`, and appends it to the file `result` when given."""
    line = json.dumps(res)
    print("SUMMARY " + line, flush=True)
    if result:
        os.makedirs(os.path.dirname(os.path.abspath(result)), exist_ok=True)
        with open(result, "a") as f:
            f.write(line + "\n")


def file_args(ap, formats):
    """The options that say which files are read: --format, --files-dir, --events."""
    ap.add_argument("--format", choices=sorted(formats), default="parquet",
                    help="the files' format (sluice nexmark generate --format)")
    ap.add_argument("--files-dir", default=None,
                    help="the bid table's files (sluice nexmark generate --table bid --format ...); default "
                         + ", ".join(f"{k}: {v['files_dir']}" for k, v in formats.items()))
    ap.add_argument("--events", type=int, default=10_000_000,
                    help="Nexmark events the files cover (the --events they were generated with; bids are 46/50)")


def events_of(a, file_rows, partial):
    """The events the files read cover, how that was found (from --events, or
    from the rows when --max-files read part of them), and the problems: a
    file count that does not match --events."""
    if a.max_files is not None and partial:
        return round(file_rows / BID_SHARE), "rows*50/46 (--max-files)", []
    expect_bids = round(a.events * BID_SHARE)
    problems = []
    if abs(file_rows - expect_bids) > 46:
        problems.append(f"--events {a.events} means about {expect_bids} bids, the files hold {file_rows}")
    return a.events, "--events", problems


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


def rnd(x, n=3):
    return None if x is None else round(x, n)


def cpu_seconds(pid):
    """utime + stime (fields 14 and 15) of /proc/<pid>/stat, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        s = f.read()
    rest = s[s.rindex(")") + 2:].split()  # fields from 3 (state) on; comm may hold spaces
    return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")


def progress_ts(p):
    """The trigger start of a progress event (ISO UTC, "...Z") as epoch seconds."""
    return datetime.datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp()


def state_rows(p):
    """numRowsTotal summed over the state operators of one progress event (None without any)."""
    ops = p.get("stateOperators") or []
    return sum(o.get("numRowsTotal", 0) for o in ops) if ops else None


# Per --format: the files' suffix and the default --files-dir.
FORMATS = {
    "parquet": {"suffix": ".parquet", "files_dir": "target/nexmark-files/bid"},
    "jsonl": {"suffix": ".jsonl", "files_dir": "target/nexmark-files-jsonl/bid"},
}

# jsonl's date_time (epoch milliseconds) as the timestamp_ntz Parquet gives.
JSONL_DATE_TIME = "timestampadd(MILLISECOND, date_time, TIMESTAMP_NTZ'1970-01-01 00:00:00') AS date_time"


def bid_schema(fmt):
    from pyspark.sql.types import (LongType, StringType, StructField, StructType, TimestampNTZType)
    # `sluice nexmark generate` writes date_time as Parquet TIMESTAMP(MILLIS,
    # isAdjustedToUTC=false): Spark's timestamp_ntz (no time zone involved in
    # date_format). In jsonl it is a JSON integer, epoch milliseconds, which
    # Spark's JSON reader would take as seconds for a timestamp column: it is
    # read as bigint and converted (JSONL_DATE_TIME).
    return StructType([
        StructField("auction", LongType()),
        StructField("bidder", LongType()),
        StructField("price", LongType()),
        StructField("channel", StringType()),
        StructField("url", StringType()),
        StructField("date_time", LongType() if fmt == "jsonl" else TimestampNTZType()),
        StructField("extra", StringType()),
    ])


def read_bid(reader, fmt, path):
    """The bid table from `reader` (spark.readStream or spark.read, options set):
    the same columns and types for both formats."""
    if fmt == "parquet":
        return reader.schema(bid_schema(fmt)).parquet(path)
    # FAILFAST: a line that does not parse fails the query instead of becoming nulls.
    df = reader.schema(bid_schema(fmt)).option("mode", "FAILFAST").json(path)
    return df.selectExpr("auction", "bidder", "price", "channel", "url", JSONL_DATE_TIME, "extra")


def input_dir(files_dir, suffix, max_files, out):
    """The directory the stream reads: files_dir, or (--max-files N) a folder of
    symlinks to its first N files (by name) of the format's suffix."""
    names = sorted(f for f in os.listdir(files_dir) if f.endswith(suffix))
    if not names:
        sys.exit(f"no {suffix} files in {files_dir}")
    if max_files is None or max_files >= len(names):
        return files_dir, len(names), len(names)
    sub = os.path.join(out, "input")
    shutil.rmtree(sub, ignore_errors=True)
    os.makedirs(sub)
    for n in names[:max_files]:
        os.symlink(os.path.join(files_dir, n), os.path.join(sub, n))
    return sub, max_files, len(names)


def run_pass(spark, a, n, jvm_pid, src_dir, ckpt, sql, mode):
    """One pass: a fresh stream over the files and a fresh checkpoint, the
    query from start to the end of its last batch. Returns its figures
    (without the checks, which need the batch queries)."""
    shutil.rmtree(ckpt, ignore_errors=True)  # a resumed checkpoint would skip the files already read
    reader = spark.readStream.option("maxFilesPerTrigger", a.max_files_per_trigger)
    read_bid(reader, a.format, src_dir).createOrReplaceTempView("bid")
    df = spark.sql(sql)
    w = (df.writeStream.format("noop").option("checkpointLocation", ckpt)
         .outputMode(mode).trigger(processingTime="0 seconds"))

    cpu0 = cpu_seconds(jvm_pid)
    t_start = time.time()
    q = w.start()
    event("query_started", **{"pass": n}, id=str(q.id), runId=str(q.runId))
    exc = None
    try:
        q.processAllAvailable()
    except Exception as e:  # the query failed: reported below
        exc = e
    t_done = time.time()
    cpu1 = cpu_seconds(jvm_pid)
    event("all_processed", **{"pass": n})
    exc = exc or q.exception()
    q.stop()
    t_stopped = time.time()
    event("query_stopped", **{"pass": n}, stop_s=round(t_stopped - t_done, 3))

    prog = [json.loads(p.json) if hasattr(p, "json") else p for p in q.recentProgress]
    data = [p for p in prog if p.get("numInputRows", 0) > 0]
    rows = sum(p.get("numInputRows", 0) for p in prog)
    te = [p["durationMs"].get("triggerExecution", 0) for p in data]
    prs = [p.get("processedRowsPerSecond", 0.0) for p in data]
    keys = sorted({k for p in data for k in p.get("durationMs", {})})
    if data:
        last = data[-1]
        t_end = progress_ts(last) + last["durationMs"].get("triggerExecution", 0) / 1000.0
    else:
        t_end = t_done
    wall = t_end - t_start
    cpu = cpu1 - cpu0
    out_rows = [p.get("sink", {}).get("numOutputRows", -1) for p in data]
    ops_last = (data[-1].get("stateOperators") or []) if data else []
    return {
        "pass": n,
        "rows": rows,
        "batches": len(data),
        "progress_events": len(prog),
        "wall_s": wall,
        "jvm_cpu_s": cpu,
        "processedRowsPerSecond_median": rnd(med(prs), 1),
        "batch_ms_median": med(te),
        "batch_ms_p99": pct(te, 99),
        "batch_ms_max": max(te) if te else None,
        "first_batch_ms": te[0] if te else None,
        "durationMs_median": {k: med([p["durationMs"].get(k, 0) for p in data]) for k in keys},
        "output_rows": sum(out_rows) if out_rows and min(out_rows) >= 0 else None,
        "state_rows_last": state_rows(data[-1]) if data else None,
        "state_memory_bytes_last": sum(o.get("memoryUsedBytes", 0) for o in ops_last) if ops_last else None,
        "t_start": t_start,
        "all_processed_after_last_batch_s": round(t_done - t_end, 3),
        "stop_s": round(t_stopped - t_done, 3),
        "exception": str(exc) if exc else None,
        # [batchId, numInputRows, triggerExecution ms, processedRowsPerSecond, state rows, trigger start]
        "per_batch": [[p["batchId"], p.get("numInputRows", 0), p["durationMs"].get("triggerExecution"),
                       rnd(p.get("processedRowsPerSecond"), 1), state_rows(p), p.get("timestamp")] for p in prog],
    }


def pass_problems(r, mode, file_rows, batch_result_rows):
    """What is wrong with one pass, given the batch queries' figures."""
    problems = []
    if r["exception"] is not None:
        problems.append(f"query failed: {r['exception']}")
    if r["rows"] != file_rows:
        problems.append(f"the stream read {r['rows']} rows, the files hold {file_rows}")
    if mode == "update":
        if r["state_rows_last"] != batch_result_rows:
            problems.append(f"the state holds {r['state_rows_last']} groups at the end, "
                            f"a batch query finds {batch_result_rows}")
    elif r["output_rows"] is not None and r["output_rows"] != batch_result_rows:
        problems.append(f"the sink got {r['output_rows']} rows, a batch query returns {batch_result_rows}")
    return problems


def rates(r, events):
    """A pass's rates: per second of wall time and per JVM CPU second."""
    wall, cpu, rows = r["wall_s"], r["jvm_cpu_s"], r["rows"]
    return {
        "wall_s": rnd(wall),
        "jvm_cpu_s": rnd(cpu, 2),
        "cores_busy": rnd(cpu / wall if wall > 0 else None, 2),
        "events_per_second": round(events / wall) if wall > 0 else None,
        "events_per_second_per_core": round(events / cpu) if cpu > 0 else None,
        "rows_per_second": round(rows / wall) if wall > 0 else None,
        "rows_per_second_per_core": round(rows / cpu) if cpu > 0 else None,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--query", choices=sorted(QUERIES), required=True)
    file_args(ap, FORMATS)
    ap.add_argument("--passes", type=int, default=2,
                    help="runs of the query in the same JVM, each a fresh stream and checkpoint; "
                         "the headline figures are the last pass's")
    ap.add_argument("--max-files-per-trigger", type=int, default=2,
                    help="maxFilesPerTrigger of the file source: files per micro-batch (Sluice's --files-per-batch)")
    ap.add_argument("--max-files", type=int, default=None,
                    help="read only the first N files (by name); events then scale to rows * 50/46")
    ap.add_argument("--out", default=None, help="run dir for <out>/checkpoint (default target/spark-nexmark/<query>)")
    ap.add_argument("--state-store", choices=["hdfs", "rocksdb"], default="hdfs", help="q17's state store")
    ap.add_argument("--shuffle-partitions", type=int, default=8, help="partitions of q17's aggregation (and state)")
    ap.add_argument("--driver-memory", default="4g")
    ap.add_argument("--result", default=None, help="also append the summary JSON line to this file")
    ap.add_argument("--tag", default="")
    a = ap.parse_args()
    if a.passes < 1:
        ap.error("--passes must be at least 1")

    out = os.path.abspath(a.out or os.path.join("target/spark-nexmark", a.query))
    ckpt = os.path.join(out, "checkpoint")
    os.makedirs(out, exist_ok=True)
    files_dir = os.path.abspath(a.files_dir or FORMATS[a.format]["files_dir"])
    src_dir, n_files, n_files_all = input_dir(files_dir, FORMATS[a.format]["suffix"], a.max_files, out)
    event("proc_start", pid=os.getpid(), pgid=os.getpgid(0))

    from pyspark.sql import SparkSession

    b = (SparkSession.builder.master("local[2]").appName(f"bench-nexmark-{a.query}")
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
    event("session_ready", spark_version=spark.version, jvm_pid=jvm_pid)

    sql = QUERIES[a.query]
    mode = "update" if a.query in UPDATE_MODE else "append"
    runs = [run_pass(spark, a, n, jvm_pid, src_dir, ckpt, sql, mode) for n in range(1, a.passes + 1)]

    # After the timed passes: the files' rows, and the query's result size, from
    # batch queries over the same files (q0-q2: the rows the sink got; q17: the
    # (auction, day) groups, which the state must hold at the end).
    t0 = time.time()
    batch = read_bid(spark.read, a.format, src_dir)
    file_rows = batch.count()
    batch.createOrReplaceTempView("bid")
    batch_result_rows = spark.sql(sql).count()
    count_s = time.time() - t0

    events, events_basis, problems = events_of(a, file_rows, n_files < n_files_all)
    passes = []
    for r in runs:
        pp = pass_problems(r, mode, file_rows, batch_result_rows)
        problems += [f"pass {r['pass']}: {p}" for p in pp]
        passes.append({
            "pass": r["pass"], **rates(r, events),
            "rows": r["rows"], "batches": r["batches"],
            "processedRowsPerSecond_median": r["processedRowsPerSecond_median"],
            "batch_ms_median": r["batch_ms_median"], "first_batch_ms": r["first_batch_ms"],
            "output_rows": r["output_rows"], "state_rows_last": r["state_rows_last"],
            "ok": not pp,
        })
    last = runs[-1]
    res = {
        "tag": a.tag,
        "system": "spark",
        "spark_version": spark.version,
        "query": a.query,
        "sql": sql,
        "output_mode": mode,
        "sink": "noop",
        "trigger": "processingTime 0 (as fast as possible)",
        "master": "local[2]",
        "format": a.format,
        "files_dir": files_dir,
        "files": n_files,
        "max_files_per_trigger": a.max_files_per_trigger,
        "shuffle_partitions": a.shuffle_partitions,
        "state_store": a.state_store if a.query in UPDATE_MODE else None,
        "events": events,
        "events_basis": events_basis,
        "headline_pass": last["pass"],
        "rows": last["rows"],
        "file_rows": file_rows,
        "rows_ok": all(r["rows"] == file_rows for r in runs),
        "batches": last["batches"],
        "progress_events": last["progress_events"],
        **rates(last, events),
        "processedRowsPerSecond_median": last["processedRowsPerSecond_median"],
        "batch_ms_median": last["batch_ms_median"],
        "batch_ms_p99": last["batch_ms_p99"],
        "batch_ms_max": last["batch_ms_max"],
        "first_batch_ms": last["first_batch_ms"],
        "durationMs_median": last["durationMs_median"],
        "output_rows": last["output_rows"],
        "batch_result_rows": batch_result_rows,
        "state_rows_last": last["state_rows_last"],
        "state_memory_bytes_last": last["state_memory_bytes_last"],
        "passes": passes,
        "startup_s": round(runs[0]["t_start"] - T_PROC, 3),
        "all_processed_after_last_batch_s": last["all_processed_after_last_batch_s"],
        "stop_s": last["stop_s"],
        "check_s": round(count_s, 3),
        "jvm_pid": jvm_pid,
        "clk_tck": os.sysconf("SC_CLK_TCK"),
        "exception": next((r["exception"] for r in runs if r["exception"]), None),
        "ok": not problems,
        "problems": problems,
        "per_batch": last["per_batch"],
    }
    summary(res, a.result)
    spark.stop()
    if src_dir != files_dir:
        shutil.rmtree(src_dir, ignore_errors=True)
    event("exit")
    if problems:
        for p in problems:
            print(f"nexmark.py {a.query}: FAILED: {p}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
