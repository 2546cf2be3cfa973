"""What the table readers of Sluice's tests share: rows as JSON text, and
DuckDB's extensions as their PyPI packages ship them."""

import glob
import json
import os

import pyarrow as pa


def rows(table):
    """Every row of an Arrow table as a JSON object, timestamps as
    microseconds since the epoch."""
    columns = {}
    for name in table.column_names:
        column = table.column(name)
        if pa.types.is_timestamp(column.type):
            column = column.cast(pa.timestamp("us", tz=column.type.tz)).cast(pa.int64())
        columns[name] = column
    return [json.dumps(r, default=str) for r in pa.table(columns).to_pylist()]


def extension(package, name):
    """The file of DuckDB extension `name` that the package `package` ships."""
    found = glob.glob(
        os.path.join(os.path.dirname(package.__file__), "extensions", "*", f"{name}.duckdb_extension")
    )
    return found[0]
