"""What one run measures: settings per system and the sizes of every workload (full or quick)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from .systems import Setting

SK_DEFAULT = Setting(
    "skiplock", "default", notes="CLI defaults: concurrency 10, prefetch 500, INFO log"
)
# The same no-op as a plain def, beside the async one: 1 process and 2 (docs/design.md,
# "Sync tasks in batches").
SK_SYNC = Setting("skiplock", "sync", handler="sync", notes="CLI defaults, the task a plain def")
# The no-op calling ctx.progress on every job, beside the default (bench/README.md, "What
# ctx.progress costs the drain").
SK_PROGRESS = Setting(
    "skiplock",
    "progress",
    handler="progress",
    notes="CLI defaults, the task reports ctx.progress on every job",
)
SK_CONTEXT = Setting(
    "skiplock",
    "context",
    handler="context",
    notes="CLI defaults, the task takes its JobContext (pass_context) and does nothing with it",
)
SK_X2 = Setting("skiplock", "x2", processes=2, notes="CLI defaults, --processes 2")
SK_X2_SYNC = Setting(
    "skiplock",
    "x2-sync",
    processes=2,
    handler="sync",
    notes="CLI defaults, --processes 2, the task a plain def",
)
# Held-lock workers (one transaction per job), for before/after pairs of changes to the held-lock
# claim (`python -m bench.pairs --settings held`); not in the full run.
SK_HELD = Setting("skiplock", "held", extra=("--model", "held"), notes="CLI defaults, --model held")
# completion="archive" beside c100x2-delete, for before/after pairs of changes to the archiving
# outcome (bench/README.md, "The charts' counts on the drain with completion delete").
SK_C100X2_ARCHIVE = Setting(
    "skiplock",
    "c100x2-archive",
    concurrency=100,
    processes=2,
    log_level="WARNING",
    completion="archive",
    notes="concurrency 100, --processes 2, log WARNING, completion archive",
)
PAIRS_ONLY = [SK_HELD, SK_C100X2_ARCHIVE]
SK_C100 = Setting(
    "skiplock", "c100", concurrency=100, log_level="WARNING", notes="concurrency 100, log WARNING"
)
SK_C100X2 = Setting(
    "skiplock",
    "c100x2",
    concurrency=100,
    processes=2,
    log_level="WARNING",
    notes="concurrency 100, --processes 2, log WARNING",
)

SK_C100X2_DELETE = Setting(
    "skiplock",
    "c100x2-delete",
    concurrency=100,
    processes=2,
    log_level="WARNING",
    completion="delete",
    notes="concurrency 100, --processes 2, log WARNING, completion delete",
)
SK_C100X2_DELETE_F150 = Setting(
    "skiplock",
    "c100x2-delete-f150",
    concurrency=100,
    processes=2,
    log_level="WARNING",
    completion="delete",
    extra=("--max-in-flight", "150", "--prefetch", "0"),
    notes="c100x2-delete with --max-in-flight 150 --prefetch 0: at most 150 claimed jobs "
    "unrecorded per process, 300 in all (a smaller crash exposure)",
)

SK_C100X2_DELETE_F1000 = Setting(
    "skiplock",
    "c100x2-delete-f1000",
    concurrency=100,
    processes=2,
    log_level="WARNING",
    completion="delete",
    extra=("--max-in-flight", "1000"),
    notes="c100x2-delete with --max-in-flight 1000: at most 1,000 claimed jobs unrecorded per "
    "process, 2,000 in all (PGQueuer's batch 500 in two processes holds 2,000)",
)


def pgq(batch: int, processes: int) -> Setting:
    return Setting(
        "pgqueuer",
        f"b{batch}x{processes}",
        batch=batch,
        processes=processes,
        notes=f"--batch-size {batch}, {processes} process(es), asyncpg, pgq autovac",
    )


PR_DEFAULT = Setting("procrastinate", "default", notes="CLI defaults: concurrency 1")
PR_C10 = Setting("procrastinate", "c10", concurrency=10, notes="--concurrency 10")
# -- real work (issue 48, item 2): each job awaits, sleeps in a thread, or burns CPU ------------

ASYNC_IO = "async-io:0.005"  # each job awaits 5 ms
SYNC_IO = "sync-io:0.005"  # each job sleeps 5 ms in a thread (a plain `def` handler)
CPU = "cpu:0.001"  # each job burns 1 ms of this thread's CPU in pure Python

# The CLI defaults (1 process, concurrency 10) beside the tuned rows: what a worker started
# without options does with real work (bench/README.md, "The worker's defaults").
SK_WORK_DEFAULT = [
    Setting(
        "skiplock",
        f"{kind.partition(':')[0]}-default",
        work=kind,
        notes=f"{what}; CLI defaults (concurrency 10, 1 process, prefetch 500, INFO log)",
    )
    for kind, what in (
        (ASYNC_IO, "async handler awaits 5 ms"),
        (SYNC_IO, "`def` handler sleeps 5 ms"),
        (CPU, "async handler burns 1 ms CPU"),
    )
]
SK_WORK = [
    Setting(
        "skiplock",
        "async-io-c100",
        concurrency=100,
        log_level="WARNING",
        work=ASYNC_IO,
        notes="async handler awaits 5 ms; concurrency 100, 1 process, log WARNING",
    ),
    Setting(
        "skiplock",
        "async-io-c100-p100",
        concurrency=100,
        log_level="WARNING",
        work=ASYNC_IO,
        extra=("--prefetch", "100"),
        notes="async-io-c100 with --prefetch 100 (the default claims up to 500 ahead)",
    ),
    Setting(
        "skiplock",
        "sync-io-c50",
        concurrency=50,
        log_level="WARNING",
        work=SYNC_IO,
        notes="`def` handler sleeps 5 ms; concurrency 50, 1 process, log WARNING",
    ),
    Setting(
        "skiplock",
        "cpu-c10x2",
        concurrency=10,
        processes=2,
        log_level="WARNING",
        work=CPU,
        notes="async handler burns 1 ms CPU; concurrency 10, --processes 2, log WARNING",
    ),
]
PGQ_WORK = [
    Setting(
        "pgqueuer",
        "async-io-c100",
        batch=50,
        concurrency=100,
        work=ASYNC_IO,
        notes="awaits 5 ms; --batch-size 50 --max-concurrent-tasks 100, 1 process",
    ),
    Setting(
        "pgqueuer",
        "cpu-c10x2",
        batch=5,
        concurrency=10,
        processes=2,
        work=CPU,
        notes="burns 1 ms CPU; --batch-size 5 --max-concurrent-tasks 10, 2 processes",
    ),
]
PR_WORK = [
    Setting(
        "procrastinate",
        "async-io-c100",
        concurrency=100,
        work=ASYNC_IO,
        notes="async task awaits 5 ms; --concurrency 100, 1 process",
    ),
    Setting(
        "procrastinate",
        "sync-io-c50",
        concurrency=50,
        work=SYNC_IO,
        notes="`def` task sleeps 5 ms (in the loop's default executor); --concurrency 50",
    ),
    Setting(
        "procrastinate",
        "cpu-c10x2",
        concurrency=10,
        processes=2,
        work=CPU,
        notes="async task burns 1 ms CPU; --concurrency 10, 2 processes",
    ),
]

# -- Celery (issue 48, item 3): its own worker, its documented throughput settings ------------


def celery(
    broker: str, pool: str, concurrency: int, prefetch: int, acks_late: bool, work: str = ""
) -> Setting:
    late = "-late" if acks_late else ""
    kind = f"{work.partition(':')[0]}-" if work else ""
    return Setting(
        f"celery-{broker}",
        f"{kind}{pool}-c{concurrency}-p{prefetch}{late}",
        concurrency=concurrency,
        pool=pool,
        prefetch=prefetch,
        acks_late=acks_late,
        work=work,
        notes=f"--pool {pool} --concurrency {concurrency} --prefetch-multiplier {prefetch}"
        + (", task_acks_late" if acks_late else "")
        + ", without gossip/mingle/heartbeat",
    )


CELERY_DRAIN = [
    celery("redis", "prefork", 2, 4, False),  # its defaults, in 2 processes
    celery("redis", "prefork", 2, 100, False),  # many short tasks: a larger prefetch
    celery("redis", "prefork", 2, 1, True),  # its advice for reliability: acks late, prefetch 1
    celery("redis", "threads", 10, 100, False),
    celery("rabbitmq", "prefork", 2, 100, False),
    celery("rabbitmq", "threads", 10, 100, False),
]
CELERY_LATENCY = [
    celery("redis", "prefork", 2, 4, False),
    celery("rabbitmq", "prefork", 2, 4, False),
]

# -- Dramatiq (issue 48, item 3): its own worker on its Redis and its RabbitMQ broker ----------


def dramatiq(
    processes: int, threads: int, prefetch: int | None = None, broker: str = "redis", work: str = ""
) -> Setting:
    kind = f"{work.partition(':')[0]}-" if work else ""
    return Setting(
        f"dramatiq-{broker}",
        f"{kind}p{processes}-t{threads}" + (f"-f{prefetch}" if prefetch else ""),
        processes=processes,
        concurrency=threads,
        prefetch=prefetch,
        work=work,
        notes=f"--processes {processes} --threads {threads}, prefetch "
        + (f"{prefetch} (dramatiq_queue_prefetch)" if prefetch else f"{2 * threads} (its default)"),
    )


DRAMATIQ_DRAIN = [
    dramatiq(2, 8),  # its defaults on 2 cores: a process per core, 8 threads each
    dramatiq(2, 8, 100),  # many short tasks: a larger prefetch
    dramatiq(2, 8, broker="rabbitmq"),
    dramatiq(2, 8, 100, broker="rabbitmq"),
]
DRAMATIQ_LATENCY = [dramatiq(2, 8), dramatiq(2, 8, broker="rabbitmq")]

# -- real work of the broker peers: the same concurrency as skiplock's rows -------------------
# Celery runs no coroutines: its async-io job is a plain def that runs its own event loop for
# the await (bench/apps/work.py), in one of 100 threads; Dramatiq's async def runs on its
# AsyncIO middleware's loop. CPU work in 2 processes (Celery's prefork pool, Dramatiq's
# processes), as the others'.
CELERY_WORK = [
    setting
    for broker in ("redis", "rabbitmq")
    for setting in (
        celery(broker, "threads", 100, 4, False, ASYNC_IO),
        celery(broker, "threads", 50, 4, False, SYNC_IO),
        celery(broker, "prefork", 2, 4, False, CPU),
    )
]
DRAMATIQ_WORK = [
    setting
    for broker in ("redis", "rabbitmq")
    for setting in (
        dramatiq(1, 100, broker=broker, work=ASYNC_IO),
        dramatiq(1, 50, broker=broker, work=SYNC_IO),
        dramatiq(2, 10, broker=broker, work=CPU),
    )
]

# -- latency under load (issue 48, item 4): each system's default worker serves both queues ----

# What bounds skiplock's figure: the time to the worker's next claim and that claim's own time
# (the default claims up to 500 jobs at once, a claim once half of them have started); a job it
# claims starts before those claimed ahead of it.  --prefetch 0 claims only for free slots.
SK_PREFETCH0 = Setting(
    "skiplock",
    "prefetch0",
    extra=("--prefetch", "0"),
    notes="CLI defaults but --prefetch 0 (claims only for free slots)",
)
# Between the two: smaller claims, sent more often (docs/design.md, "Better jobs start before
# the reserve").
SK_PREFETCH100 = Setting(
    "skiplock",
    "prefetch100",
    extra=("--prefetch", "100"),
    notes="CLI defaults but --prefetch 100 (claims of about 50-100 jobs)",
)

UNDERLOAD = [
    dataclasses.replace(st, other_queue=True)
    for st in (
        SK_DEFAULT,
        SK_PREFETCH0,
        SK_PREFETCH100,
        pgq(10, 1),
        PR_DEFAULT,
        celery("redis", "prefork", 2, 4, False),
        celery("rabbitmq", "prefork", 2, 4, False),
        dramatiq(2, 8),
        dramatiq(2, 8, broker="rabbitmq"),
    )
]

SQL_FLOOR = Setting(
    "sql-floor",
    "listen-claim",
    notes="raw SQL on psycopg: INSERT+NOTIFY, LISTEN, claim of up to 10 committed, mark done",
)


@dataclass
class Plan:
    quick: bool
    repeat: int
    enqueue_single: int
    enqueue_bulk: int
    bulk_batch: int
    drain_sizes: list[int]
    drain_settings: list[Setting]
    big_drain_settings: list[Setting]  # the settings also run at the largest size
    big_drain_repeat: int
    procrastinate_drain: int  # Procrastinate drains this many instead (it runs ~100-300 jobs/s)
    latency_rate: float
    latency_seconds: float
    latency_settings: list[Setting]
    scale_background: int
    scale_due: int
    scale_claims: int
    scale_drain_s: float
    scale_setting: Setting
    longtx: tuple[float, float, float]
    longtx_settings: list[Setting]
    ceiling_batches: list[int]
    ceiling_modes: list[str]
    ceiling_clients: list[int]
    ceiling_jobs: dict[int, int] = field(default_factory=dict)
    own_sql_batches: list[int] = field(default_factory=list)  # skiplock's statements, pgbench
    # A drain per setting through the counting proxy (bench/wire.py): statements per job.
    statements_jobs: int = 0
    statements_settings: list[Setting] = field(default_factory=list)
    # Real work (bench/apps/work.py): jobs per drain by kind of work, Procrastinate's instead.
    work_jobs: dict[str, int] = field(default_factory=dict)
    work_procrastinate: int = 0
    work_settings: list[Setting] = field(default_factory=list)
    # Celery and Dramatiq drain this many instead (no bulk send: their preload is one message
    # at a time)
    celery_drain: int = 0
    # Latency under load: the backlog by system, each trickled kind's rate and longest time.
    underload_jobs: dict[str, int] = field(default_factory=dict)
    underload_rate: float = 50.0
    underload_seconds: float = 0.0
    underload_settings: list[Setting] = field(default_factory=list)


def make_plan(quick: bool, repeat: int | None) -> Plan:
    if quick:
        return Plan(
            quick=True,
            repeat=repeat or 1,
            # Every workload and system once, each as small as still exercises it (the tests
            # run this): the drains' bounded settings, but one setting per peer; skiplock's
            # sync handler in the full plan.
            enqueue_single=100,
            enqueue_bulk=2000,
            bulk_batch=500,
            drain_sizes=[1000],
            drain_settings=[
                SK_DEFAULT,
                SK_C100X2_DELETE,
                SK_C100X2_DELETE_F1000,
                SK_C100X2_DELETE_F150,
                pgq(100, 2),
                PR_DEFAULT,
                CELERY_DRAIN[1],
                DRAMATIQ_DRAIN[0],
                DRAMATIQ_DRAIN[2],  # on RabbitMQ: its start-up and drain take ~3 s here
            ],
            big_drain_settings=[],
            big_drain_repeat=1,
            procrastinate_drain=200,
            latency_rate=50.0,
            latency_seconds=0.5,
            latency_settings=[SK_DEFAULT, pgq(10, 1), PR_DEFAULT, CELERY_LATENCY[0], SQL_FLOOR],
            scale_background=10_000,
            scale_due=1000,
            scale_claims=20,
            scale_drain_s=1.0,
            scale_setting=SK_DEFAULT,
            longtx=(0.5, 1.0, 0.5),
            longtx_settings=[SK_DEFAULT, pgq(100, 1), PR_C10],
            ceiling_batches=[1, 10, 100],
            ceiling_modes=["done", "delete"],
            ceiling_clients=[2],
            ceiling_jobs={1: 200, 10: 1000, 100: 2000},
            own_sql_batches=[10, 100],
            statements_jobs=1000,
            statements_settings=[SK_DEFAULT, pgq(100, 2), PR_DEFAULT],
            # skiplock's I/O rows only (each drain costs seconds of set-up in CI; the peers'
            # handlers of each kind run in the full plan, the CPU burn in tests/unit)
            work_jobs={"async-io": 500, "sync-io": 500, "cpu": 200},
            work_procrastinate=100,
            work_settings=[SK_WORK[0], SK_WORK[2]],
            celery_drain=500,
            # backlogs that outlast the first trickled jobs; one broker peer (Dramatiq: its drain
            # is the shorter), Procrastinate's and Celery's in the full plan; skiplock's default
            # worker only (the targets'), its prefetch settings in the full plan
            underload_jobs={"skiplock": 5000, "pgqueuer": 2000, "dramatiq-redis": 500},
            underload_seconds=1.0,
            underload_settings=[
                s
                for s in UNDERLOAD
                if s.system in ("pgqueuer", "dramatiq-redis") or s.key == "skiplock/default"
            ],
        )
    pgq_all = [pgq(b, p) for b in (10, 100, 500) for p in (1, 2)]
    skiplock_all = [
        SK_DEFAULT,
        SK_SYNC,
        SK_X2,
        SK_X2_SYNC,
        SK_C100,
        SK_C100X2,
        SK_C100X2_DELETE,
        SK_C100X2_DELETE_F1000,
        SK_C100X2_DELETE_F150,
    ]
    # the context and progress rows beside the default: what ctx.progress costs the drain
    every_setting = [
        *skiplock_all,
        SK_CONTEXT,
        SK_PROGRESS,
        *pgq_all,
        PR_DEFAULT,
        PR_C10,
        *CELERY_DRAIN,
        *DRAMATIQ_DRAIN,
    ]
    return Plan(
        quick=False,
        repeat=repeat or 3,
        enqueue_single=2000,
        enqueue_bulk=50_000,
        bulk_batch=1000,
        drain_sizes=[20_000, 100_000],
        drain_settings=every_setting,
        big_drain_settings=[
            *skiplock_all,
            pgq(100, 1),
            pgq(100, 2),
            pgq(500, 1),
            pgq(500, 2),
        ],
        big_drain_repeat=max(1, (repeat or 3) - 1),
        procrastinate_drain=2000,
        latency_rate=50.0,
        latency_seconds=10.0,
        latency_settings=[
            SK_DEFAULT,
            pgq(10, 1),
            PR_DEFAULT,
            *CELERY_LATENCY,
            *DRAMATIQ_LATENCY,
            SQL_FLOOR,
        ],
        scale_background=1_000_000,
        scale_due=10_000,
        scale_claims=300,
        scale_drain_s=4.0,
        scale_setting=SK_DEFAULT,
        longtx=(20.0, 60.0, 20.0),
        longtx_settings=[SK_DEFAULT, pgq(100, 1), PR_C10],
        ceiling_batches=[1, 10, 100],
        ceiling_modes=["done", "delete"],
        ceiling_clients=[1, 2, 4, 8],
        ceiling_jobs={1: 4000, 10: 20_000, 100: 20_000},
        own_sql_batches=[10, 100],
        statements_jobs=20_000,
        # each drained once more, counted (Celery sends no SQL)
        statements_settings=[
            s for s in every_setting if not s.system.startswith(("celery", "dramatiq"))
        ],
        work_jobs={"async-io": 20_000, "sync-io": 10_000, "cpu": 2000},
        work_procrastinate=2000,
        work_settings=[
            *SK_WORK_DEFAULT,
            *SK_WORK,
            *PGQ_WORK,
            *PR_WORK,
            *CELERY_WORK,
            *DRAMATIQ_WORK,
        ],
        celery_drain=5000,
        # the 100,000 where a system drains them in seconds; else about 10 s of work
        underload_jobs={
            "skiplock": 100_000,
            "pgqueuer": 30_000,
            "procrastinate": 2000,
            "celery-redis": 10_000,
            "celery-rabbitmq": 10_000,
            "dramatiq-redis": 10_000,
            "dramatiq-rabbitmq": 10_000,
        },
        underload_seconds=10.0,
        underload_settings=UNDERLOAD,
    )


def plan_from_dict(d: dict[str, Any]) -> Plan:
    """The plan as ``results.json`` stored it (for ``--report-only``)."""
    d = dict(d)
    for name in (
        "drain_settings",
        "big_drain_settings",
        "latency_settings",
        "longtx_settings",
        "statements_settings",
        "work_settings",
        "underload_settings",
    ):
        d[name] = [Setting(**{**s, "extra": tuple(s.get("extra", ()))}) for s in d.get(name, [])]
    s = d["scale_setting"]
    d["scale_setting"] = Setting(**{**s, "extra": tuple(s.get("extra", ()))})
    d["longtx"] = tuple(d["longtx"])
    d["ceiling_jobs"] = {int(k): v for k, v in d["ceiling_jobs"].items()}
    return Plan(**d)
