"""Reads a Delta table with two outside readers, for Sluice's tests.

Usage: read_delta.py <table path> <app id>

Prints one JSON object: the table's version and data file count as
deltalake (delta-rs) sees them, the txn version of <app id>, and every row
as read by deltalake and, again, by DuckDB's delta extension (delta_kernel),
each row a JSON object with timestamps as microseconds since the epoch.
Runs offline: DuckDB loads the extensions that duckdb-extension-delta and
duckdb-extension-httpfs ship. A table on S3 (s3://bucket/prefix) is read
with the AWS_* variables of the environment (AWS_ENDPOINT_URL, keys,
AWS_REGION, AWS_ALLOW_HTTP), as Sluice's nodes read them.
"""

import json
import os
import sys

import deltalake
import duckdb
import duckdb_extension_delta
import duckdb_extension_httpfs
from urllib.parse import urlparse
from readers import extension, rows


def duckdb_rows(path):
    con = duckdb.connect(config={"autoinstall_known_extensions": False})
    if path.startswith("s3://"):
        con.execute(f"LOAD '{extension(duckdb_extension_httpfs, 'httpfs')}'")
        endpoint = urlparse(os.environ["AWS_ENDPOINT_URL"])
        con.execute(
            "CREATE SECRET (TYPE s3, KEY_ID ?, SECRET ?, REGION ?, ENDPOINT ?, URL_STYLE 'path', USE_SSL ?)",
            [
                os.environ["AWS_ACCESS_KEY_ID"],
                os.environ["AWS_SECRET_ACCESS_KEY"],
                os.environ["AWS_REGION"],
                endpoint.netloc,
                endpoint.scheme == "https",
            ],
        )
    con.execute(f"LOAD '{extension(duckdb_extension_delta, 'delta')}'")
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
