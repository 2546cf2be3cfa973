"""Reads an Iceberg table with two outside readers, for Sluice's tests.

Usage: read_iceberg.py <sqlite catalog file> <catalog name> <namespace> <table>

Prints one JSON object: the current snapshot's summaries back to the
first (newest first) and its data file count as pyiceberg sees them, and
every row as read by pyiceberg (through its SQL catalog) and, again, by
DuckDB's iceberg extension from the current metadata file the catalog
names, each row a JSON object with timestamps as microseconds since the
epoch. Runs offline: DuckDB loads the extensions duckdb-extension-iceberg
and duckdb-extension-avro ship.
"""

import json
import sys

import duckdb
import duckdb_extension_avro
import duckdb_extension_iceberg
from pyiceberg.catalog.sql import SqlCatalog
from readers import extension, rows


def duckdb_rows(metadata_location):
    con = duckdb.connect(config={"autoinstall_known_extensions": False})
    con.execute(f"LOAD '{extension(duckdb_extension_avro, 'avro')}'")
    con.execute(f"LOAD '{extension(duckdb_extension_iceberg, 'iceberg')}'")
    return rows(con.execute("SELECT * FROM iceberg_scan(?)", [metadata_location]).fetch_arrow_table())


def main():
    file, name, namespace, table_name = sys.argv[1:5]
    catalog = SqlCatalog(name, uri=f"sqlite:///{file}")
    table = catalog.load_table((namespace, table_name))
    snapshots = []
    snapshot = table.current_snapshot()
    while snapshot is not None:
        summary = snapshot.summary
        snapshots.append({"operation": summary.operation.value, **summary.additional_properties})
        snapshot = table.snapshot_by_id(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id else None
    out = {
        "snapshots": snapshots,
        "files": len(list(table.scan().plan_files())),
        "pyiceberg": rows(table.scan().to_arrow()),
        "duckdb": duckdb_rows(table.metadata_location),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
