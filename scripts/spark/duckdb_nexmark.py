#!/usr/bin/env python3
"""DuckDB batch reference for Sluice's Nexmark q0, q1, q2, q17: the limit of the hardware.

Runs the SQL of nexmark.py's queries, in DuckDB's dialect, once as a batch
query over the same files of the `bid` table (written by
`sluice nexmark generate --table bid --format parquet|jsonl`), with
`SET threads=2` (--threads), in an in-memory database of this process:

  q0   SELECT auction, bidder, price, date_time, extra FROM bid
  q1   SELECT auction, bidder, 0.908 * price AS price, date_time, extra FROM bid
  q2   SELECT auction, price FROM bid WHERE auction % 123 = 0
  q17  per (auction, strftime(date_time, '%Y-%m-%d')): bid counts in three
       price ranges (FILTER clauses), min, max, avg, sum of the price

`bid` is a view over read_parquet([files]) or, for jsonl,
read_json([files], format='newline_delimited', columns={...}) with the
schema given and date_time read as BIGINT (epoch milliseconds, the instant
in UTC) and turned into a TIMESTAMP by epoch_ms(), the same wall-clock
value the Parquet files' TIMESTAMP (isAdjustedToUTC=false) gives.

The result is materialised in full, `CREATE TEMP TABLE r AS <query>`, so
DuckDB reads and produces every column of every row (a bare count(*) would
let it skip the work). The timed part is that statement: its wall time and
this process's CPU seconds over it (resource.getrusage(RUSAGE_SELF), user +
sys, every DuckDB thread included). Each query runs --passes times (default
2); the SUMMARY's headline figures are the last pass's, "passes" lists
every pass. rows_per_second_per_core = the files' rows / those CPU seconds;
events_per_second_per_core = --events / those CPU seconds.

After the passes, the files' row count (SELECT count(*) FROM bid) and the
rows of r (result_rows, to compare with nexmark.py's batch_result_rows)
check the run: every pass must give the same result_rows, q0 and q1 as many
as the files hold, and the files must hold 46/50 of --events; otherwise the
script exits with status 1 (after printing the SUMMARY, with the reasons in
"problems").

Prints one "SUMMARY " JSON line per query (--query all: q0, q1, q2, q17 one
after another in the same process); --result appends the same JSON lines to
a file.
"""
import argparse
import os
import resource
import shutil
import sys
import time

from nexmark import events_of, file_args, summary

# Per --format: the files' suffix and the default --files-dir (as nexmark.py).
FORMATS = {
    "parquet": {"suffix": ".parquet", "files_dir": "target/nexmark-files/bid"},
    "jsonl": {"suffix": ".jsonl", "files_dir": "target/nexmark-files-jsonl/bid"},
}

QUERIES = {
    "q0": "SELECT auction, bidder, price, date_time, extra FROM bid",
    "q1": "SELECT auction, bidder, 0.908 * price AS price, date_time, extra FROM bid",
    "q2": "SELECT auction, price FROM bid WHERE auction % 123 = 0",
    "q17": ("SELECT auction, strftime(date_time, '%Y-%m-%d') AS day, count(*) AS total_bids, "
            "count(*) FILTER (WHERE price < 10000) AS rank1_bids, "
            "count(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids, "
            "count(*) FILTER (WHERE price >= 1000000) AS rank3_bids, "
            "min(price) AS min_price, max(price) AS max_price, avg(price) AS avg_price, "
            "sum(price) AS sum_price "
            "FROM bid GROUP BY auction, strftime(date_time, '%Y-%m-%d')"),
}
ORDER = ["q0", "q1", "q2", "q17"]

# The bid table's columns as the jsonl files hold them.
JSONL_COLUMNS = ("{auction: 'BIGINT', bidder: 'BIGINT', price: 'BIGINT', channel: 'VARCHAR', "
                 "url: 'VARCHAR', date_time: 'BIGINT', extra: 'VARCHAR'}")


def rnd(x, n=3):
    return None if x is None else round(x, n)


def cpu_seconds():
    """User + system CPU seconds of this process so far, all threads."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def sql_str(s):
    return "'" + s.replace("'", "''") + "'"


def input_files(files_dir, suffix, max_files):
    """The files to read: those of the format's suffix under files_dir, by
    name, the first --max-files of them."""
    names = sorted(f for f in os.listdir(files_dir) if f.endswith(suffix))
    if not names:
        sys.exit(f"no {suffix} files in {files_dir}")
    n_all = len(names)
    if max_files is not None:
        names = names[:max_files]
    return [os.path.join(files_dir, n) for n in names], n_all


def bid_view(fmt, files):
    """CREATE VIEW bid over the files: the same columns and types for both formats."""
    lst = "[" + ", ".join(sql_str(f) for f in files) + "]"
    if fmt == "parquet":
        return f"CREATE OR REPLACE VIEW bid AS SELECT * FROM read_parquet({lst})"
    return ("CREATE OR REPLACE VIEW bid AS SELECT auction, bidder, price, channel, url, "
            "epoch_ms(date_time) AS date_time, extra "
            f"FROM read_json({lst}, format = 'newline_delimited', columns = {JSONL_COLUMNS})")


def run_pass(con, sql, n):
    """One pass: the query materialised into the temp table r. Returns its figures."""
    con.execute("DROP TABLE IF EXISTS r")
    cpu0 = cpu_seconds()
    t0 = time.perf_counter()
    con.execute(f"CREATE TEMP TABLE r AS {sql}")
    wall = time.perf_counter() - t0
    cpu = cpu_seconds() - cpu0
    result_rows = con.execute("SELECT count(*) FROM r").fetchone()[0]
    return {"pass": n, "wall_s": wall, "cpu_s": cpu, "result_rows": result_rows}


def rates(r, rows, events):
    wall, cpu = r["wall_s"], r["cpu_s"]
    return {
        "wall_s": rnd(wall),
        "cpu_s": rnd(cpu),
        "cores_busy": rnd(cpu / wall if wall > 0 else None, 2),
        "events_per_second": round(events / wall) if wall > 0 else None,
        "events_per_second_per_core": round(events / cpu) if cpu > 0 else None,
        "rows_per_second": round(rows / wall) if wall > 0 else None,
        "rows_per_second_per_core": round(rows / cpu) if cpu > 0 else None,
    }


def run_query(con, a, query, files, n_files_all, files_dir):
    sql = QUERIES[query]
    runs = [run_pass(con, sql, n) for n in range(1, a.passes + 1)]
    columns = [[c, t] for c, t in con.execute(
        "SELECT column_name, data_type FROM information_schema.columns "
        "WHERE table_name = 'r' ORDER BY ordinal_position").fetchall()]
    con.execute("DROP TABLE IF EXISTS r")

    # After the timed passes: the files' rows.
    t0 = time.perf_counter()
    file_rows = con.execute("SELECT count(*) FROM bid").fetchone()[0]
    count_s = time.perf_counter() - t0

    events, events_basis, problems = events_of(a, file_rows, len(files) < n_files_all)
    last = runs[-1]
    for r in runs:
        if r["result_rows"] != last["result_rows"]:
            problems.append(f"pass {r['pass']} gave {r['result_rows']} rows, pass {last['pass']} "
                            f"{last['result_rows']}")
    if query in ("q0", "q1") and last["result_rows"] != file_rows:
        problems.append(f"{query} gave {last['result_rows']} rows, the files hold {file_rows}")
    return {
        "tag": a.tag,
        "system": "duckdb",
        "duckdb_version": DUCKDB_VERSION,
        "query": query,
        "sql": sql,
        "mode": "batch, CREATE TEMP TABLE r AS <query>",
        "threads": a.threads,
        "format": a.format,
        "files_dir": files_dir,
        "files": len(files),
        "events": events,
        "events_basis": events_basis,
        "headline_pass": last["pass"],
        "rows": file_rows,
        "file_rows": file_rows,
        "result_rows": last["result_rows"],
        "result_columns": columns,
        **rates(last, file_rows, events),
        "passes": [{"pass": r["pass"], **rates(r, file_rows, events), "result_rows": r["result_rows"]}
                   for r in runs],
        "check_s": round(count_s, 3),
        "ok": not problems,
        "problems": problems,
    }


def main():
    global DUCKDB_VERSION
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--query", choices=ORDER + ["all"], default="all")
    file_args(ap, FORMATS)
    ap.add_argument("--max-files", type=int, default=None,
                    help="read only the first N files (by name); events then scale to rows * 50/46")
    ap.add_argument("--passes", type=int, default=2,
                    help="runs of each query; the headline figures are the last pass's")
    ap.add_argument("--threads", type=int, default=2, help="DuckDB's threads (SET threads)")
    ap.add_argument("--out", default="target/duckdb-nexmark",
                    help="run dir; <out>/tmp is DuckDB's temp_directory, for a result larger than memory")
    ap.add_argument("--result", default=None, help="also append the summary JSON lines to this file")
    ap.add_argument("--tag", default="")
    a = ap.parse_args()
    if a.passes < 1:
        ap.error("--passes must be at least 1")

    import duckdb
    DUCKDB_VERSION = duckdb.__version__

    files_dir = os.path.abspath(a.files_dir or FORMATS[a.format]["files_dir"])
    files, n_files_all = input_files(files_dir, FORMATS[a.format]["suffix"], a.max_files)
    tmp = os.path.join(os.path.abspath(a.out), "tmp")
    os.makedirs(tmp, exist_ok=True)

    con = duckdb.connect(":memory:")
    con.execute(f"SET threads = {int(a.threads)}")
    con.execute(f"SET temp_directory = {sql_str(tmp)}")
    con.execute(bid_view(a.format, files))

    failed = []
    for q in ORDER if a.query == "all" else [a.query]:
        res = run_query(con, a, q, files, n_files_all, files_dir)
        summary(res, a.result)
        for p in res["problems"]:
            print(f"duckdb_nexmark.py {q}: FAILED: {p}", file=sys.stderr, flush=True)
            failed.append(q)
    con.close()
    shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failed else 0


DUCKDB_VERSION = None

if __name__ == "__main__":
    sys.exit(main())
