"""Stand-in for ROCm/aotriton v3python/tune/dispatch_tasks.py at
6e00ef3e335b45dfb49065259533b59c68995bfe (with flash/module.py's entry choices, tdesc.py's
generate_entries_from_choices and pq/dispatcher.py's bulk INSERT), cut to the flash module and
the options tune_aotriton passes: `flash WORKDIR --arch A.. [--<field> V..] [--skip_completed]
[-y]`. Kept quirks: each filter is a FlashEntry field (nargs='*', choices = the module's); causal
entries with a bias are not tuned (Flash.validate_entry); --skip_completed leaves out only tasks
whose status is 'completed' (pending ones are queued again); create_arch_partition, then INSERT."""

import argparse
import itertools
import os
import sys
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import psycopg
from psycopg.types.json import Jsonb


@dataclass
class FlashEntry:
    dtype: object = "float16"
    hdim: object = 16
    seqlen_q: object = 16
    seqlen_k: object = 16
    causal: object = 0
    dropout_p: object = 0.0
    bias_type: object = 0


SEQLENS = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
CHOICES = FlashEntry(
    dtype=["float16", "bfloat16", "float32"],
    hdim=[16, 32, 48, 64, 80, 96, 128, 160, 192, 224, 256, 512],
    seqlen_q=SEQLENS,
    seqlen_k=SEQLENS,
    causal=[False, True],
    dropout_p=[0.0, 0.5],
    bias_type=[0, 1],
)


def str_to_bool(s: str) -> bool:
    if s not in ("0", "1"):
        raise argparse.ArgumentTypeError(f"Boolean value must be 0 or 1, got '{s}'")
    return s == "1"


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Dispatch tuning tasks to PostgreSQL queue")
    flash = parser.add_subparsers(dest="module", required=True).add_parser("flash")
    flash.add_argument("workdir", type=Path)
    flash.add_argument("--arch", type=str, nargs="+", required=True)
    flash.add_argument("--skip_completed", action="store_true")
    flash.add_argument("-y", "--yes", action="store_true")
    for field in fields(CHOICES):
        choices = getattr(CHOICES, field.name)
        kind = str_to_bool if isinstance(choices[0], bool) else type(choices[0])
        flag = f"--{field.name}"
        flash.add_argument(flag, type=kind, nargs="*", choices=choices, default=choices)
    return parser.parse_args()


def entries(args: argparse.Namespace):
    lists = [[v for v in getattr(CHOICES, f.name) if v in getattr(args, f.name)]
             for f in fields(CHOICES)]  # fmt: skip
    for values in itertools.product(*lists):
        entry = FlashEntry(*values)
        if not (entry.causal and entry.bias_type != 0):  # Flash.validate_entry
            yield entry


def key(task_config: dict) -> tuple:
    return (task_config["arch"], *(task_config["entry"][f.name] for f in fields(FlashEntry)))


def main() -> None:
    args = parse()
    env = os.environ
    params = {"host": env["CELERY_SERVICE_HOST"], "port": int(env["POSTGRES_PORT"]),
              "user": env["POSTGRES_USER"], "password": env["POSTGRES_PASSWORD"]}  # fmt: skip
    with psycopg.connect(**params) as conn:
        done = set()
        if args.skip_completed:
            rows = conn.execute("SELECT task_config FROM task_queue WHERE status = 'completed' "
                                "AND module = %s", (args.module,))  # fmt: skip
            done = {key(row[0]) for row in rows}
        tasks = [{"arch": a, "module": args.module, "entry": asdict(e)}
                 for e in entries(args) for a in args.arch]  # fmt: skip
        tasks = [t for t in tasks if key(t) not in done]
        print(f"Prepared {len(tasks)} tasks for dispatch")
        for arch in args.arch:
            conn.execute("SELECT create_arch_partition(%s)", (arch,))
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO task_queue (arch, module, task_config, priority) "
                "VALUES (%s, %s, %s, 5)",
                [(t["arch"], t["module"], Jsonb(t)) for t in tasks],
            )
    print(f"Dispatched {len(tasks)} tasks to PostgreSQL queue", file=sys.stdout)


if __name__ == "__main__":
    main()
