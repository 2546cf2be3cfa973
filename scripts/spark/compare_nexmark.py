#!/usr/bin/env python3
"""Sluice beside a warm Spark and DuckDB's batch, per CPU second, on the same files.

For each query of --queries (default q0,q1,q2,q17), over the files of
--format (parquet: target/nexmark-files, jsonl: target/nexmark-files-jsonl,
written by `sluice nexmark generate`), back to back in one session:

  1. Sluice: `sluice-bench nexmark --query Q --input files|jsonl`
  2. Spark:  `nexmark.py --query Q --passes 2` (one JVM; the second pass is
             the headline, the first is shown too)
  3. Sluice again (the figure is the lower of its two runs)
  4. DuckDB: `duckdb_nexmark.py --query Q --passes 2` (the limit)

Each figure is the files' rows over the CPU seconds of the engine's own
process (user + system, from /proc). Prints a Markdown table, and one
"SUMMARY " JSON line per query (--result appends them to a file). Exits 1
when a run fails or a peer's check fails. Run it with nothing else using
the cores, from the repository root, with the venv of scripts/spark/README.md
on PATH.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def last_json(text, prefix=None):
    """The last JSON object of `text`: a line starting with `prefix`, or the
    whole of it (sluice-bench prints one JSON document)."""
    if prefix is None:
        return json.loads(text[text.index("{"):])
    lines = [ln[len(prefix):] for ln in text.splitlines() if ln.startswith(prefix)]
    if not lines:
        raise RuntimeError(f"no {prefix.strip()} line")
    return json.loads(lines[-1])


def run(cmd, log):
    """Runs `cmd`, its stderr into `log` and its stdout into `log` with
    `.out` for `.log`; returns its stdout and status."""
    with open(log, "w") as err:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
    with open(log[: -len(".log")] + ".out", "w") as out:
        out.write(p.stdout)
    return p.stdout, p.returncode


def sluice(a, q, log):
    inp = "files" if a.format == "parquet" else "jsonl"
    cmd = [a.sluice_bench, "nexmark", "--query", q, "--input", inp, "--events", str(a.events)]
    out, rc = run(cmd, log)
    if rc != 0:
        raise RuntimeError(f"sluice-bench {q} exited {rc} (see {log})")
    figures = last_json(out)["queries"][0]
    if "failed" in figures:
        raise RuntimeError(f"sluice {q}: {figures['failed']}")
    return figures


def peer(a, q, script, log):
    """One run of a peer's script (nexmark.py: Spark, duckdb_nexmark.py:
    DuckDB), two passes; its SUMMARY."""
    cmd = [sys.executable, os.path.join(HERE, script), "--query", q,
           "--format", a.format, "--passes", "2", "--events", str(a.events)]
    out, rc = run(cmd, log)
    s = last_json(out, "SUMMARY ")
    if rc != 0 or not s.get("ok"):
        raise RuntimeError(f"{script} {q}: {s.get('problems')} (see {log})")
    return s


def millions(x):
    return f"{x / 1e6:.2f} M"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--format", choices=["parquet", "jsonl"], default="parquet")
    ap.add_argument("--queries", default="q0,q1,q2,q17")
    ap.add_argument("--events", type=int, default=10_000_000,
                    help="the events the files were generated with")
    ap.add_argument("--sluice-bench", default="target/release/sluice-bench")
    ap.add_argument("--out", default="target/compare-nexmark", help="the runs' logs")
    ap.add_argument("--result", default=None, help="also append the SUMMARY lines to this file")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)

    rows, failed = [], False
    for q in a.queries.split(","):
        log = lambda who: os.path.join(a.out, f"{q}-{a.format}-{who}.log")  # noqa: E731
        try:
            first = sluice(a, q, log("sluice-1"))
            sp = peer(a, q, "nexmark.py", log("spark"))
            second = sluice(a, q, log("sluice-2"))
            dk = peer(a, q, "duckdb_nexmark.py", log("duckdb"))
        except RuntimeError as e:
            print(f"{q}: {e}", file=sys.stderr)
            failed = True
            continue
        ours = min(first["rows_per_second_per_core"], second["rows_per_second_per_core"])
        res = {
            "query": q,
            "format": a.format,
            "sluice_rows_per_cpu_s": ours,
            "sluice_runs": [first["rows_per_second_per_core"], second["rows_per_second_per_core"]],
            "spark_warm_rows_per_cpu_s": sp["rows_per_second_per_core"],
            "spark_first_rows_per_cpu_s": sp["passes"][0]["rows_per_second_per_core"],
            "duckdb_rows_per_cpu_s": dk["rows_per_second_per_core"],
            "vs_spark_warm": round(ours / sp["rows_per_second_per_core"], 2),
            "vs_duckdb": round(ours / dk["rows_per_second_per_core"], 2),
        }
        line = json.dumps(res)
        print("SUMMARY " + line, flush=True)
        if a.result:
            with open(a.result, "a") as f:
                f.write(line + "\n")
        rows.append(res)

    print(f"\n{a.format}, rows per CPU second of each engine's process:\n")
    print("| query | Sluice | Spark, warm (first pass) | DuckDB, batch | Sluice / Spark warm |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['query']} | {millions(r['sluice_rows_per_cpu_s'])} "
              f"| {millions(r['spark_warm_rows_per_cpu_s'])} ({millions(r['spark_first_rows_per_cpu_s'])}) "
              f"| {millions(r['duckdb_rows_per_cpu_s'])} | {r['vs_spark_warm']:.2f}× |")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
