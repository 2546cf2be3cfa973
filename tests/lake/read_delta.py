"""Reads a Delta table with two outside readers, for Sluice's tests.

Usage: read_delta.py <table path> <app id>

Prints one JSON object: the table's version and data file count as
deltalake (delta-rs) sees them, the txn version of <app id>, and every row
as read by deltalake and, again, by DuckDB's delta extension (delta_kernel),
each row a JSON object with timestamps as microseconds since the epoch.
Runs offline: DuckDB loads the extension that duckdb-extension-delta ships.
"""

import glob
import json
import os
import sys

import deltalake
import duckdb
import duckdb_extension_delta
import pyarrow as pa


def rows(table):
    columns = {}
    for name in table.column_names:
        column = table.column(name)
        if pa.types.is_timestamp(column.type):
            column = column.cast(pa.timestamp("us", tz=column.type.tz)).cast(pa.int64())
        columns[name] = column
    return [json.dumps(r, default=str) for r in pa.table(columns).to_pylist()]


def duckdb_rows(path):
    ext = glob.glob(
        os.path.join(
            os.path.dirname(duckdb_extension_delta.__file__),
            "extensions",
            "*",
            "delta.duckdb_extension",
        )
    )
    con = duckdb.connect(config={"autoinstall_known_extensions": False})
    con.execute(f"LOAD '{ext[0]}'")
    return rows(con.execute("SELECT * FROM delta_scan(?)", [path]).fetch_arrow_table())


def main():
    path, app_id = sys.argv[1], sys.argv[2]
    table = deltalake.DeltaTable(path)
    out = {
        "version": table.version(),
        "files": len(table.file_uris()),
        "txn": table.transaction_version(app_id),
        "partition_columns": table.metadata().partition_columns,
        "deltalake": rows(table.to_pyarrow_table()),
        "duckdb": duckdb_rows(path),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
