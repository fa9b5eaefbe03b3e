"""Stand-in for ROCm/aotriton python/database_decompose.py at
6e00ef3e335b45dfb49065259533b59c68995bfe (`aotriton.database_decompose`), same CLI:
`--database_file C --script_output S --decompose_output D`. Upstream writes S, a script of
`sqlite3` heredocs (each table's CREATE sql without the id column, then INSERT ... SELECT from the
central database WHERE gpu LIKE '<arch>_%') and a `tarxz` run through "$GNU_PARALLEL"; here the
same SQL runs in Python (no sqlite3 CLI needed) and S keeps the tarxz part: after `bash S`,
D/amd/<arch>/<family>/<kernel>.sqlite3.tar.xz."""

import argparse
import sqlite3
from pathlib import Path

TARXZ = r"""
tarxz() {
  (
    d=$(dirname "$1")
    b=$(basename "$1")
    cd "$d"
    tar cJf "$b.tar.xz" "$b"
    rm "$b"
  )
}"""


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--database_file", type=Path, required=True)
    p.add_argument("--script_output", type=Path, required=True)
    p.add_argument("--decompose_output", type=Path, required=True)
    args = p.parse_args()
    central = sqlite3.connect(args.database_file)
    tables = central.execute("SELECT tbl_name, sql FROM sqlite_master WHERE type='table'")
    for table, sql in tables.fetchall():
        family, kernel = table.split("$")
        cols = ",".join(f'"{c[1]}"' for c in central.execute(f"PRAGMA table_info('{table}')")
                        if c[1] != "id")  # fmt: skip
        for (gpu,) in central.execute(f"SELECT DISTINCT gpu FROM '{table}'").fetchall():
            arch = gpu.rsplit("_mod", 1)[0]  # gpu_targets.gpu2arch
            db_dir = args.decompose_output / "amd" / arch / family.lower()
            db_dir.mkdir(parents=True, exist_ok=True)
            with sqlite3.connect(db_dir / f"{kernel}.sqlite3") as shard:
                shard.execute(sql.replace("id INTEGER PRIMARY KEY,", ""))
                shard.execute(f"ATTACH DATABASE '{args.database_file}' AS central")
                shard.execute(f"INSERT INTO '{table}' SELECT {cols} FROM central.'{table}' "
                              f"WHERE gpu LIKE '{arch}_%'")  # fmt: skip
            shard.close()
    central.close()
    found = f"find {(args.decompose_output / 'amd').as_posix()} -name '*.sqlite3'"
    run = f'export -f tarxz\n{found} | "$GNU_PARALLEL" tarxz\n'
    args.script_output.write_text(f"#/bin/bash\n{TARXZ}\n{run}")


if __name__ == "__main__":
    main()
