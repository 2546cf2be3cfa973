"""Appends rows to an Iceberg table with pyiceberg, as another writer of
the table beside Sluice, for Sluice's tests.

Usage: append_iceberg.py <sqlite catalog file> <catalog name> <namespace> <table> <first> <count>

Appends <count> snapshots of one row each, whose one column `value` holds
<first>, <first> + 1, ...; a commit that loses a race with another writer
is tried again on the table as it is then. Prints how many commits lost a
race.
"""

import sys
import time

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import CommitFailedException


def main():
    file, name, namespace, table_name = sys.argv[1:5]
    first, count = int(sys.argv[5]), int(sys.argv[6])
    catalog = SqlCatalog(name, uri=f"sqlite:///{file}")
    lost = 0
    for value in range(first, first + count):
        while True:
            table = catalog.load_table((namespace, table_name))
            rows = pa.Table.from_pylist([{"value": value}], schema=table.schema().as_arrow())
            try:
                table.append(rows)
                break
            except CommitFailedException:
                lost += 1
        time.sleep(0.05)
    print(lost)


if __name__ == "__main__":
    main()
