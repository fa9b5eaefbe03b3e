"""Stand-in for ROCm/aotriton python/database_compose.py at
6e00ef3e335b45dfb49065259533b59c68995bfe (`aotriton.database_compose`), same CLI and SQL: into
--database_file (which must already hold the tables: upstream's tuning_database.sqlite3,
extracted by the build), every <decomposed>/amd/<arch>/<family>/<kernel>.sqlite3 is attached and
its '<FAMILY>$<kernel>' rows inserted (SELECT *: shards and central tables have no id column)."""

import argparse
import sqlite3
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--database_file", type=Path, required=True)
    p.add_argument("--decomposed", type=Path, required=True)
    p.add_argument("--vendors", nargs="*", default=["amd"])
    args = p.parse_args()
    with sqlite3.connect(args.database_file) as dbc:
        for vendor in args.vendors:
            for fn in (args.decomposed / vendor).glob("*/*/*.sqlite3"):
                _arch, family, base = fn.parts[-3:]
                table = f"'{family.upper()}${Path(base).stem}'"
                dbc.execute(f"ATTACH DATABASE '{fn.as_posix()}' AS subdb;")
                dbc.execute(f"INSERT INTO {table} SELECT * FROM subdb.{table};")
                dbc.commit()
                dbc.execute("DETACH DATABASE subdb;")


if __name__ == "__main__":
    main()
