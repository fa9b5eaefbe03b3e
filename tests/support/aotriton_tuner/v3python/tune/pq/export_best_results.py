"""Stand-in for ROCm/aotriton v3python/tune/pq/export_best_results.py at
6e00ef3e335b45dfb49065259533b59c68995bfe, cut to attn_fwd (the kernel the test's synthetic results
name): `--workdir WD --output central.sqlite3`; best_tuning_results joined with task_queue (not
cancelled) into the central database's "FLASH$attn_fwd" (id INTEGER PRIMARY KEY, the columns of
_FWD_COLS, UNIQUE over the inputs); a psel the results lack is 0. Connection from WD/config.rc."""

import argparse
import sqlite3
from pathlib import Path

import psycopg

# (sqlite column, source, key) as _FWD_COLS at the pin; every column but gpu/dtype is INTEGER
FWD_COLS = [
    ("gpu", "gpu", None),
    ("inputs$Q_dtype", "derived", "dtype"),
    ("inputs$Max_seqlen_q", "entry", "seqlen_q"),
    ("inputs$Max_seqlen_k", "entry", "seqlen_k"),
    ("inputs$CAUSAL_TYPE", "derived", "causal"),
    ("inputs$BLOCK_DMODEL", "entry", "hdim"),
    ("inputs$ENABLE_DROPOUT", "derived", "dropout_p"),
    *((f"inputs${k}", "psels", k) for k in ("PADDED_HEAD",)),
    ("inputs$BIAS_TYPE", "entry", "bias_type"),
    *((f"inputs${k}", "psels", k) for k in ("USE_ALIBI", "INT8", "INT8_KV", "USE_P_SCALE")),
    *((f"tuned_kernel${k}", "psels", k)
      for k in ("PERSISTENT_TYPE", "GRID_CU_MULTIP", "BLOCK_M", "BLOCK_N", "PRE_LOAD_V")),
    *((f"compiler_options${k}", "copts", k) for k in ("waves_per_eu", "num_warps", "num_stages")),
]  # fmt: skip
FWD_UNIQUE = [c for c, _, _ in FWD_COLS if not c.startswith(("tuned_kernel$", "compiler_"))]


def value(source: str, key: str | None, arch: str, entry: dict, impl_desc: dict):
    if source == "gpu":
        return f"{arch}_mod0"
    if source == "entry":
        return entry[key]
    if source in ("psels", "copts"):
        return (impl_desc.get(source) or {}).get(key, 0)
    if key == "dtype":
        return f"torch.{entry['dtype']}"
    if key == "causal":
        return 0 if entry["causal"] in (False, 0) else 3  # CausalType NONE / WINDOWED
    return 1 if entry.get("dropout_p", 0.0) > 0.0 else 0


def ensure_table(db: sqlite3.Connection) -> None:
    cols = ", ".join(f'"{c}" {"TEXT" if c in ("gpu", "inputs$Q_dtype") else "INTEGER"}'
                     for c, _, _ in FWD_COLS)  # fmt: skip
    unique = ", ".join(f'"{c}"' for c in FWD_UNIQUE)
    db.execute(f'CREATE TABLE IF NOT EXISTS "FLASH$attn_fwd" (id INTEGER PRIMARY KEY, {cols}, '
               f"UNIQUE({unique}))")  # fmt: skip


def insert(db: sqlite3.Connection, arch: str, entry: dict, impl_desc: dict) -> None:
    names = ", ".join(f'"{c}"' for c, _, _ in FWD_COLS)
    values = [value(s, k, arch, entry, impl_desc) for _, s, k in FWD_COLS]
    marks = ", ".join("?" * len(values))
    db.execute(f'INSERT OR REPLACE INTO "FLASH$attn_fwd" ({names}) VALUES ({marks})', values)


def connection(workdir: Path) -> dict:
    rc = dict(line.split("=", 1) for line in (workdir / "config.rc").read_text().split())
    return {"host": rc["CELERY_SERVICE_HOST"], "port": int(rc["POSTGRES_PORT"]),
            "user": rc["POSTGRES_USER"], "password": rc["POSTGRES_PASSWORD"]}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args()
    with psycopg.connect(**connection(args.workdir), autocommit=True) as pg:
        rows = pg.execute(
            "SELECT b.arch, b.task_config, b.impl_desc FROM best_tuning_results b "
            "JOIN task_queue t ON t.id = b.task_id AND t.arch = b.arch "
            "WHERE t.status != 'cancelled' AND b.kernel_name = 'attn_fwd'"
        ).fetchall()
    with sqlite3.connect(args.output) as db:
        ensure_table(db)
        for arch, task_config, impl_desc in rows:
            if impl_desc is not None:
                insert(db, arch, task_config["entry"], impl_desc)
    print(f"Done: {len(rows)} rows exported to {args.output}")


if __name__ == "__main__":
    main()
