#!/usr/bin/env python3
"""A simulation of 64 to 1,024 remote workers running flowc's compile DAG.
Prints figures; asserts nothing.

    python3 bench/remote_sim.py --trace FILE [--trace FILE2 ...]
        [--synthetic N] [--workers 64,128,256,512,1024] [--latency-ms 1]
        [--bandwidth-gbps 10] [--cas-bandwidth-gbps G] [--cas-round-trips 2]
        [--worker-fetch-mb 70] [--order critical-path|fifo] [--resample 400]
        [--kernel-seconds 0.05] [--kernel-sigma 0.8] [--plan-seconds 0.3]
        [--link-seconds 0.5] [--seed 1] [--json]

A job is a DAG of tasks (ingest, plan, codegen x N, measure, link): a trace
from `flowc jobs --json` (each task's measured seconds and bytes) or, with
--synthetic N, a plan, N codegen tasks with log-normal durations (median
--kernel-seconds, sigma --kernel-sigma) and a link. ingest and link run on
the daemon's machine (one at a time); every other task is a REAPI action on
one of N workers. The simulator is a discrete-event list scheduler; per
model and worker count it prints the makespan, the speedup and efficiency
against one worker, the efficiency the DAG allows (its limit: the critical
path, and the serial tasks plus the rest of the work over N workers), the
cold-farm figures (every worker first fetches the flowc-worker
binary) and what limits scaling there.

Ready actions are dispatched critical-path first: by bottom level, the
longest path (durations plus network) from the task to the end of the job.
For the fan-out here (plan -> independent codegen -> link) that orders the
kernels longest first, which bounds the makespan of independent tasks at
4/3 of the optimum (Graham's LPT bound) instead of 2 for an arbitrary
order; unlike plain longest-first it also stays right for deeper DAGs (a
codegen followed by the search issue's measure task outranks a longer
kernel with nothing after it). flowc would pass this order to the engine
as each Action's execution priority; `--order fifo` shows what an engine
that ignores priorities costs.

Network model (RTT = --latency-ms, a round trip between any two machines;
each link moves --bandwidth-gbps; the CAS server's link, shared by all
workers, --cas-bandwidth-gbps; transfers on a shared link are served one
after another in the order they start):
- daemon, when a task is ready: --cas-round-trips round trips
  (GetActionResult, FindMissingBlobs); if the task's inputs come from the
  daemon (no remote dependency), one upload round trip plus its bytes on
  the daemon's link; Execute reaches the engine half a round trip later;
- engine: queues the action; a free worker gets its lease half a round
  trip later;
- worker: on its first action only (cold), one round trip plus the
  toolchain (--worker-fetch-mb MB) through the CAS link; one round trip
  plus the input bytes; the task's measured seconds; one round trip plus
  the output bytes to the CAS; its report reaches the engine half a round
  trip later (the worker is free from then);
- daemon: the Execute stream ends (a round trip after the upload), then
  one round trip plus the output bytes on the daemon's link (fetched and
  verified by digest); dependents become ready.
T1 is the same simulation on one worker. MB are 10^6 bytes, Gbit/s 10^9
bits per second.
"""
import argparse
import dataclasses
import heapq
import json
import math
import os
import pathlib
import random
import sys

from hostinfo import cpu_line

KINDS = ("ingest", "plan", "codegen", "measure", "link")
LOCAL_KINDS = {"ingest", "link"}
# Stages of a trace without deps: each task depends on every task of the
# nearest earlier stage that has any.
STAGES = (("ingest",), ("plan",), ("codegen",), ("measure",), ("link",))
MAX_TASKS = 200_000
MAX_TRACE_BYTES = 256 * 1024 * 1024
MAX_SECONDS = 1e6
MAX_BYTES = 10**13
MAX_WORKERS = 65_536
SEVERAL_HUNDRED = 200  # "a compile of several hundred kernels" starts here


class InputError(Exception):
    """Bad input: the message names the file, the task and the field."""


# The DAG --------------------------------------------------------------------

@dataclasses.dataclass
class Task:
    id: str
    kind: str
    seconds: float
    input_bytes: int
    output_bytes: int
    deps: list  # indices into Dag.tasks
    local: bool


@dataclasses.dataclass
class Dag:
    model: str
    source: str  # "trace FILE", "synthetic ...", "resampled ..."
    isa: str  # where the durations were measured, "" if unknown
    tasks: list
    children: list = dataclasses.field(default_factory=list)
    order: list = dataclasses.field(default_factory=list)  # topological

    def count(self, kind):
        return sum(1 for t in self.tasks if t.kind == kind)


def finish_dag(dag, where):
    """Fills children and a topological order; a cycle is an InputError
    naming tasks on it."""
    n = len(dag.tasks)
    dag.children = [[] for _ in range(n)]
    pending = [0] * n
    for i, task in enumerate(dag.tasks):
        for d in task.deps:
            dag.children[d].append(i)
        pending[i] = len(task.deps)
    order = [i for i in range(n) if pending[i] == 0]
    for i in order:  # grows while it is walked
        for c in dag.children[i]:
            pending[c] -= 1
            if pending[c] == 0:
                order.append(c)
    if len(order) < n:
        stuck = [dag.tasks[i].id for i in range(n) if pending[i] > 0]
        shown = ", ".join(repr(s) for s in stuck[:5]) + (" ..." if len(stuck) > 5 else "")
        raise InputError(f"{where}: the deps form a cycle ({len(stuck)} tasks never become "
                         f"ready: {shown})")
    dag.order = order
    return dag


def _number(value, where, field, integer):
    # bool is an int in Python; JSON true is no byte count.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{where}: `{field}` must be a number, not {json.dumps(value)[:40]}")
    if integer and not (isinstance(value, int) or float(value).is_integer()):
        raise InputError(f"{where}: `{field}` must be a whole number of bytes, not {value}")
    limit = MAX_BYTES if integer else MAX_SECONDS
    if not math.isfinite(value) or value < 0 or value > limit:
        raise InputError(f"{where}: `{field}` must be between 0 and {limit:g}, not {value}")
    return int(value) if integer else float(value)


def load_trace(path):
    """The DAG of a JSON trace ({"model", "isa", "tasks": [...]}), checked."""
    try:
        size = os.path.getsize(path)
        if size > MAX_TRACE_BYTES:
            raise InputError(f"{path}: {size} bytes, more than the {MAX_TRACE_BYTES} a trace "
                             f"may have")
        with open(path, "rb") as f:
            raw = f.read(MAX_TRACE_BYTES + 1)
    except OSError as e:
        raise InputError(f"{path}: cannot read the trace: {e.strerror or e}") from None
    try:
        doc = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not UTF-8 text (byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not JSON: {e.msg} at line {e.lineno} column {e.colno}") \
            from None
    except RecursionError:
        raise InputError(f"{path}: not JSON: nested too deeply") from None
    if not isinstance(doc, dict):
        raise InputError(f"{path}: the trace must be a JSON object with `tasks`, not a "
                         f"{type(doc).__name__}")
    for field in ("model", "isa"):
        if field in doc and not isinstance(doc[field], str):
            raise InputError(f"{path}: `{field}` must be a string")
    tasks = doc.get("tasks")
    if not isinstance(tasks, list) or not tasks:
        raise InputError(f"{path}: `tasks` must be a non-empty list of tasks")
    if len(tasks) > MAX_TASKS:
        raise InputError(f"{path}: {len(tasks)} tasks, more than the {MAX_TASKS} simulated")
    with_deps = [isinstance(t, dict) and "deps" in t for t in tasks]
    ids, parsed = {}, []
    for i, t in enumerate(tasks):
        where = f"{path}: task {i}"
        if not isinstance(t, dict):
            raise InputError(f"{where}: must be an object, not {json.dumps(t)[:40]}")
        tid = t.get("id")
        if not isinstance(tid, str) or not tid or len(tid) > 1000:
            raise InputError(f"{where}: `id` must be a non-empty string of at most 1000 "
                             f"characters")
        where = f"{path}: task {i} ({tid!r})"
        if tid in ids:
            raise InputError(f"{where}: duplicate id (also task {ids[tid]})")
        ids[tid] = i
        kind = t.get("kind")
        if kind not in KINDS:
            raise InputError(f"{where}: `kind` must be one of {', '.join(KINDS)}, not "
                             f"{json.dumps(kind)[:40]}")
        unknown = sorted(set(t) - {"id", "kind", "seconds", "input_bytes", "output_bytes",
                                   "deps", "local", "where"})
        if unknown:
            raise InputError(f"{where}: unknown field `{unknown[0]}`")
        if "seconds" not in t:
            raise InputError(f"{where}: `seconds` is missing")
        seconds = _number(t["seconds"], where, "seconds", False)
        sizes = [_number(t.get(f, 0), where, f, True) for f in ("input_bytes", "output_bytes")]
        local = t.get("local", kind in LOCAL_KINDS)
        if not isinstance(local, bool):
            raise InputError(f"{where}: `local` must be true or false")
        if any(with_deps) and not with_deps[i]:
            raise InputError(f"{where}: no `deps` while other tasks have them: give every "
                             f"task its deps, or none (then they follow the kinds)")
        parsed.append((where, Task(tid, kind, seconds, sizes[0], sizes[1], [], local),
                       t.get("deps")))
    for where, task, deps in parsed:
        if deps is None:
            continue
        if not isinstance(deps, list) or len(deps) > len(tasks):
            raise InputError(f"{where}: `deps` must be a list of task ids")
        seen = set()
        for d in deps:
            if not isinstance(d, str) or d not in ids:
                raise InputError(f"{where}: dep {json.dumps(d)[:60]} is no task of the trace")
            if d == task.id:
                raise InputError(f"{where}: depends on itself")
            if d not in seen:
                seen.add(d)
                task.deps.append(ids[d])
    dag = Dag(doc.get("model") or pathlib.Path(path).stem, f"trace {path}", doc.get("isa", ""),
              [task for _, task, _ in parsed])
    if not any(with_deps):
        deps_by_kind(dag)
    return finish_dag(dag, path)


def deps_by_kind(dag):
    """ingest -> plan -> codegen -> measure -> link, each stage on the whole
    of the nearest earlier stage that has tasks."""
    previous = []
    for stage in STAGES:
        members = [i for i, t in enumerate(dag.tasks) if t.kind in stage]
        for i in members:
            dag.tasks[i].deps = list(previous)
        if members:
            previous = members


def synthetic_dag(kernels, args, rng):
    """A plan, `kernels` codegen tasks with log-normal durations and sizes
    (the sizes around those of a real kernel IR and object), a link."""
    tasks = []
    codegen = []
    for k in range(kernels):
        seconds = min(MAX_SECONDS, args.kernel_seconds * math.exp(rng.gauss(0, args.kernel_sigma)))
        codegen.append(Task(f"codegen:k{k}", "codegen", seconds,
                            int(4200 * math.exp(rng.gauss(0, 0.5))),
                            int(9100 * math.exp(rng.gauss(0, 0.5))), [0], False))
    plan_output = sum(t.input_bytes for t in codegen) + 64 * 1024
    tasks.append(Task("plan", "plan", args.plan_seconds, 350_000, plan_output, [], False))
    tasks += codegen
    tasks.append(Task("link", "link", args.link_seconds, 0, 0,
                      list(range(1, kernels + 1)), True))
    source = (f"synthetic: codegen log-normal, median {args.kernel_seconds:g} s, sigma "
              f"{args.kernel_sigma:g}; plan {args.plan_seconds:g} s, link "
              f"{args.link_seconds:g} s; seed {args.seed} (assumed, not measured)")
    return finish_dag(Dag(f"synthetic-{kernels}", source, "", tasks), "--synthetic")


def resampled_dag(dag, kernels, rng):
    """`dag` with its codegen tasks replaced by `kernels` drawn from them
    (with replacement): each clone keeps its source's seconds, bytes and
    deps, and every task that depended on a codegen task depends on all the
    clones. None where the DAG has no codegen task."""
    sources = [i for i, t in enumerate(dag.tasks) if t.kind == "codegen"]
    if not sources:
        return None
    keep = [i for i, t in enumerate(dag.tasks) if t.kind != "codegen"]
    new_index = {old: new for new, old in enumerate(keep)}
    tasks = []
    for old in keep:
        t = dag.tasks[old]
        tasks.append(Task(t.id, t.kind, t.seconds, t.input_bytes, t.output_bytes, [], t.local))
    clones = []
    for k in range(kernels):
        s = dag.tasks[rng.choice(sources)]
        clones.append(Task(f"{s.id}#{k}", "codegen", s.seconds, s.input_bytes, s.output_bytes,
                           [new_index[d] for d in s.deps if d in new_index], s.local))
    first_clone = len(tasks)
    clone_indices = list(range(first_clone, first_clone + kernels))
    for old, task in zip(keep, tasks):
        deps = [new_index[d] for d in dag.tasks[old].deps if d in new_index]
        if any(dag.tasks[d].kind == "codegen" for d in dag.tasks[old].deps):
            deps += clone_indices
        task.deps = deps
    tasks += clones
    source = (f"{kernels} codegen tasks resampled from the {len(sources)} of {dag.source}, "
              f"other tasks as measured")
    return finish_dag(Dag(f"{dag.model} (resampled {kernels})", source, dag.isa, tasks),
                      dag.source)


# Network and costs ----------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Network:
    rtt: float  # seconds per round trip
    bandwidth: float  # bytes/s: the daemon's link and each worker's
    cas_bandwidth: float  # bytes/s: the CAS server's link, shared by all workers
    cas_round_trips: int  # daemon -> CAS before Execute
    toolchain_bytes: int  # flowc-worker, fetched once per worker

    def uploads(self, dag, i):
        """The daemon uploads a task's inputs unless a remote dependency
        already put them in the CAS."""
        return not any(not dag.tasks[d].local for d in dag.tasks[i].deps)

    def action_overhead(self, dag, i):
        """Seconds of network around remote task i with no contention and a
        warm worker (what the critical path counts)."""
        t = dag.tasks[i]
        if t.local:
            return 0.0
        worker = min(self.bandwidth, self.cas_bandwidth)
        seconds = self.cas_round_trips * self.rtt + 0.5 * self.rtt  # CAS checks, Execute
        if self.uploads(dag, i):
            seconds += self.rtt + t.input_bytes / self.bandwidth
        seconds += 0.5 * self.rtt  # the lease
        seconds += self.rtt + t.input_bytes / worker  # the worker fetches its inputs
        seconds += self.rtt + t.output_bytes / worker  # and uploads its outputs
        seconds += self.rtt  # the Execute stream's answer reaches the daemon
        seconds += self.rtt + t.output_bytes / self.bandwidth  # the daemon fetches them
        return seconds


@dataclasses.dataclass
class CriticalPath:
    seconds: float
    tasks: list  # indices, first to last
    by_kind: dict  # kind -> seconds of task work on the path
    network: float


def bottom_levels(dag, net):
    """Per task, the longest path from its start to the end of the job:
    its duration and network plus its longest successor's."""
    level = [0.0] * len(dag.tasks)
    for i in reversed(dag.order):
        own = dag.tasks[i].seconds + net.action_overhead(dag, i)
        level[i] = own + max((level[c] for c in dag.children[i]), default=0.0)
    return level


def critical_path(dag, net, level):
    roots = [i for i in dag.order if not dag.tasks[i].deps]
    i = max(roots, key=lambda r: (level[r], -r))
    path = [i]
    while dag.children[i]:
        i = max(dag.children[i], key=lambda c: (level[c], -c))
        path.append(i)
    by_kind, network = {}, 0.0
    for i in path:
        t = dag.tasks[i]
        by_kind[t.kind] = by_kind.get(t.kind, 0.0) + t.seconds
        network += net.action_overhead(dag, i)
    return CriticalPath(level[path[0]], path, by_kind, network)


MAX_EXCLUSIVE_CHECKS = 64


def exclusive_tasks(dag, net):
    """The tasks every other task runs before or after (an ancestor or a
    descendant of each: plan, link): nothing overlaps them in any schedule,
    so all workers but one idle while they run (Amdahl's serial part).
    Candidates are those alone when every task starts as soon as its deps
    end; at most MAX_EXCLUSIVE_CHECKS are verified (a walk each), so a long
    chain only loosens the bound it feeds."""
    n = len(dag.tasks)
    start, finish = [0.0] * n, [0.0] * n
    for i in dag.order:
        start[i] = max((finish[d] for d in dag.tasks[i].deps), default=0.0)
        finish[i] = start[i] + dag.tasks[i].seconds + net.action_overhead(dag, i)
    by_start = sorted(range(n), key=lambda i: (start[i], finish[i]))
    # Latest finish among the tasks before each position, earliest start after.
    before, latest = [0.0] * n, -math.inf
    for k, i in enumerate(by_start):
        before[k], latest = latest, max(latest, finish[i])
    after, earliest = [0.0] * n, math.inf
    for k in range(n - 1, -1, -1):
        after[k], earliest = earliest, min(earliest, start[by_start[k]])
    candidates = [i for k, i in enumerate(by_start) if finish[i] > start[i]
                  and before[k] <= start[i] and after[k] >= finish[i]]
    parents = [t.deps for t in dag.tasks]

    def reach(i, edges):
        seen, todo = {i}, [i]
        while todo:
            for j in edges[todo.pop()]:
                if j not in seen:
                    seen.add(j)
                    todo.append(j)
        return len(seen) - 1

    return [i for i in candidates[:MAX_EXCLUSIVE_CHECKS]
            if reach(i, parents) + reach(i, dag.children) == n - 1]


def worker_seconds(dag, net, i):
    """The least time remote task i holds a worker: the lease, its inputs,
    its run, its outputs, its report."""
    t = dag.tasks[i]
    worker = min(net.bandwidth, net.cas_bandwidth)
    return 3 * net.rtt + t.seconds + (t.input_bytes + t.output_bytes) / worker


# The simulation ---------------------------------------------------------------

class Link:
    """A shared link: transfers are served one after another in the order
    they start, at the link's bandwidth."""

    def __init__(self, bandwidth):
        self.bandwidth = bandwidth
        self.free_at = 0.0
        self.busy = 0.0

    def transfer(self, now, size, endpoint_bandwidth=None):
        """When `size` bytes started at `now` have arrived; an endpoint's own
        link (a worker's) caps the rate too."""
        seconds = size / self.bandwidth
        self.free_at = max(now, self.free_at) + seconds
        self.busy += seconds
        if endpoint_bandwidth:
            return max(self.free_at, now + size / endpoint_bandwidth)
        return self.free_at


@dataclasses.dataclass
class Run:
    makespan: float
    daemon_link_busy: float
    cas_link_busy: float
    toolchain_fetches: int


def simulate(dag, workers, net, priority, cold):
    """The makespan of `dag` on `workers` remote workers (cold: each fetches
    the toolchain before its first action) and one local slot; ready actions
    and local tasks start in `priority` order (lower first)."""
    rtt = net.rtt
    events = []
    seq = 0

    def at(time, what, task, worker=-1):
        nonlocal seq
        heapq.heappush(events, (time, seq, what, task, worker))
        seq += 1

    pending = [len(t.deps) for t in dag.tasks]
    daemon_link, cas_link = Link(net.bandwidth), Link(net.cas_bandwidth)
    idle = list(range(workers - 1, -1, -1))  # a stack: the last freed worker asks first
    warm = [not cold] * workers
    fetches = 0
    engine, local_queue = [], []
    local_busy = False
    done_at = 0.0

    # Actions queued and workers freed at one instant are matched after all
    # of that instant's events, so that the priority orders them.
    def dispatch(now):
        while idle and engine:
            _, i = heapq.heappop(engine)
            at(now + 0.5 * rtt, "lease", i, idle.pop())

    def start_local(now):
        nonlocal local_busy
        if not local_busy and local_queue:
            _, i = heapq.heappop(local_queue)
            local_busy = True
            at(now + dag.tasks[i].seconds, "local_done", i)

    for i in sorted((i for i in dag.order if pending[i] == 0), key=lambda i: priority(i, 0.0)):
        at(0.0, "ready", i)
    while events:
        now, _, what, i, w = heapq.heappop(events)
        task = dag.tasks[i]
        if what == "ready":
            if task.local:
                heapq.heappush(local_queue, (priority(i, now), i))
            else:
                at(now + net.cas_round_trips * rtt, "checked", i)
        elif what == "checked":
            if net.uploads(dag, i):
                now = daemon_link.transfer(now, task.input_bytes) + rtt
            at(now + 0.5 * rtt, "queued", i)
        elif what == "queued":
            heapq.heappush(engine, (priority(i, now), i))
        elif what == "lease":
            if not warm[w]:
                warm[w] = True
                fetches += 1
                now = cas_link.transfer(now, net.toolchain_bytes, net.bandwidth) + rtt
            at(now, "fetch", i, w)
        elif what == "fetch":
            at(cas_link.transfer(now, task.input_bytes, net.bandwidth) + rtt + task.seconds,
               "ran", i, w)
        elif what == "ran":
            uploaded = cas_link.transfer(now, task.output_bytes, net.bandwidth) + rtt
            at(uploaded + 0.5 * rtt, "free", i, w)
            at(uploaded + rtt, "answered", i)
        elif what == "free":
            idle.append(w)
        elif what == "answered":
            at(daemon_link.transfer(now, task.output_bytes) + rtt, "done", i)
        elif what in ("done", "local_done"):
            if what == "local_done":
                local_busy = False
            done_at = max(done_at, now)
            ready = []
            for c in dag.children[i]:
                pending[c] -= 1
                if pending[c] == 0:
                    ready.append(c)
            # The daemon submits what became ready in priority order.
            for c in sorted(ready, key=lambda c: priority(c, now)):
                at(now, "ready", c)
        if not events or events[0][0] > now:
            dispatch(now)
            start_local(now)
    return Run(done_at, daemon_link.busy, cas_link.busy, fetches)


def priority_of(order, level):
    if order == "fifo":
        return lambda i, now: (now, i)
    return lambda i, now: (-level[i], i)


# Figures --------------------------------------------------------------------

def limits_at(n, row, model):
    """What limits scaling at n workers, most telling first."""
    reasons = []
    remote = model["remote_tasks"]
    if remote < n:
        reasons.append(f"too few tasks ({remote} remote for {n} workers)")
    cp = model["critical_path"]
    serial = model["serial_seconds"]
    spread = sum(serial.values()) + model["parallel_worker_seconds"] / n
    if cp["seconds"] >= spread:
        groups = {"serial plan + link": cp["ingest"] + cp["plan"] + cp["link"],
                  "longest codegen": cp["codegen"] + cp["measure"], "network": cp["network"]}
        name, seconds = max(groups.items(), key=lambda kv: kv[1])
        reasons.append(f"critical path {cp['seconds']:.2f} s >= serial + work/N {spread:.2f} s "
                       f"({name} {seconds:.2f} s of it)")
    elif sum(serial.values()) * (n - 1) >= 0.5 * (n * row["makespan"] - model["t1"]) > 0:
        parts = " + ".join(f"{'serial plan' if k == 'plan' else k} {v:.2f} s"
                           for k, v in serial.items() if v > 0)
        reasons.append(f"{parts}: {n - 1} other worker{'s' if n > 2 else ''} idle meanwhile "
                       f"(Amdahl)")
    for link, busy in (("daemon's link", row["daemon_link_busy"]),
                       ("CAS link", row["cas_link_busy"])):
        if busy >= 0.5 * row["makespan"]:
            reasons.append(f"network: the {link} busy {busy / row['makespan']:.0%} of the "
                           f"makespan")
    if row["efficiency_vs_limit"] < 0.9:
        reasons.append(f"the schedule: {row['efficiency_vs_limit']:.0%} of the DAG's limit "
                       f"(the order, contention, the last kernels)")
    if not reasons:
        reasons.append("nothing yet: work-bound")
    return reasons


def cold_limit(n, row, model):
    extra = row["cold_makespan"] - row["makespan"]
    fetch = model["toolchain_mb"] * 1e6 / model["cas_bandwidth"]
    return (f"cold farm at {n} workers: +{extra:.2f} s ({row['toolchain_fetches']} toolchain "
            f"fetches of {model['toolchain_mb']:g} MB share the CAS link, {fetch * 1e3:.0f} ms "
            f"each alone)")


def figures(dag, workers, net, order):
    level = bottom_levels(dag, net)
    priority = priority_of(order, level)
    cp = critical_path(dag, net, level)
    remote = [i for i, t in enumerate(dag.tasks) if not t.local]
    work = sum(t.seconds for t in dag.tasks)
    overheads = [net.action_overhead(dag, i) for i in remote if dag.tasks[i].kind == "codegen"]
    codegen_seconds = [dag.tasks[i].seconds for i in remote if dag.tasks[i].kind == "codegen"]
    exclusive = exclusive_tasks(dag, net)
    serial = {}
    for i in exclusive:
        kind = dag.tasks[i].kind
        serial[kind] = serial.get(kind, 0.0) + dag.tasks[i].seconds + net.action_overhead(dag, i)
    others = set(range(len(dag.tasks))) - set(exclusive)
    parallel = sum(worker_seconds(dag, net, i) for i in others if not dag.tasks[i].local)
    local_rest = sum(dag.tasks[i].seconds for i in others if dag.tasks[i].local)
    t1 = simulate(dag, 1, net, priority, cold=False).makespan
    if t1 <= 0:
        raise InputError(f"{dag.source}: nothing to schedule: every task takes 0 s and no "
                         f"network time")
    t1_cold = simulate(dag, 1, net, priority, cold=True).makespan
    model = {
        "model": dag.model, "source": dag.source, "measured_on": dag.isa,
        "tasks": {k: dag.count(k) for k in KINDS if dag.count(k)},
        "remote_tasks": len(remote), "work_seconds": work,
        "codegen_seconds_mean": (sum(codegen_seconds) / len(codegen_seconds)
                                 if codegen_seconds else 0.0),
        "codegen_network_mean": sum(overheads) / len(overheads) if overheads else 0.0,
        "critical_path": {"seconds": cp.seconds, "network": cp.network,
                          "tasks": [dag.tasks[i].id for i in cp.tasks],
                          **{k: cp.by_kind.get(k, 0.0) for k in KINDS}},
        "serial_seconds": serial,
        "parallel_worker_seconds": parallel,
        "t1": t1, "t1_cold": t1_cold, "order": order,
        "toolchain_mb": net.toolchain_bytes / 1e6, "cas_bandwidth": net.cas_bandwidth,
        "results": [],
    }
    for n in workers:
        run = simulate(dag, n, net, priority, cold=False)
        cold = simulate(dag, n, net, priority, cold=True)
        # The DAG's limit: no schedule beats the critical path, nor the
        # serial tasks followed by the rest of the work spread over n workers
        # (and the one local slot).
        ideal = max(cp.seconds, sum(serial.values()) + max(parallel / n, local_rest))
        row = {"workers": n, "makespan": run.makespan, "dag_limit": ideal,
               "speedup": t1 / run.makespan,
               "efficiency": t1 / (n * run.makespan),
               # T1 is a schedule and the limit a bound: on one worker their
               # ratio passes 1 by the overhead the bound leaves out.
               "dag_limit_efficiency": min(1.0, t1 / (n * ideal)),
               "efficiency_vs_limit": ideal / run.makespan,
               "daemon_link_busy": run.daemon_link_busy, "cas_link_busy": run.cas_link_busy,
               "cold_makespan": cold.makespan, "cold_efficiency": t1_cold / (n * cold.makespan),
               "toolchain_fetches": cold.toolchain_fetches}
        row["limits"] = limits_at(n, row, model)
        row["cold_limit"] = cold_limit(n, row, model)
        model["results"].append(row)
    return model


def print_model(model):
    tasks = ", ".join(f"{v} {k}" for k, v in model["tasks"].items())
    measured = f", durations measured on {model['measured_on']}" if model["measured_on"] else ""
    print(f"\n{model['model']} ({model['source']}{measured})")
    print(f"  {tasks}; {model['remote_tasks']} remote actions; work {model['work_seconds']:.2f} s")
    if model["codegen_seconds_mean"]:
        print(f"  codegen: mean {model['codegen_seconds_mean'] * 1e3:.1f} ms of work, "
              f"{model['codegen_network_mean'] * 1e3:.1f} ms of network around each")
    cp = model["critical_path"]
    parts = " + ".join(f"{name} {cp[kind]:.3f}" for kind, name in
                       (("ingest", "ingest"), ("plan", "plan"), ("codegen", "longest codegen"),
                        ("measure", "measure"), ("link", "link")) if cp[kind] > 0)
    print(f"  critical path {cp['seconds']:.3f} s = {parts or '0'} + network {cp['network']:.3f}"
          f" ({len(cp['tasks'])} tasks)")
    order = "in arrival order (fifo)" if model["order"] == "fifo" else "critical-path first"
    serial = sum(model["serial_seconds"].values())
    if serial > 0:
        parts = " + ".join(f"{k} {v:.3f}" for k, v in model["serial_seconds"].items())
        print(f"  serial tasks (every other task runs before or after them): {parts} = "
              f"{serial:.3f} s: speedup at most {model['t1'] / serial:.1f}x (Amdahl)")
    n = model["results"][0]["workers"]
    needed = max((4 * n - 5) * serial, 0.8 * n * cp["seconds"] - serial)
    kernels = (f", ~{math.ceil(needed / model['codegen_seconds_mean'])} kernels of this mean"
               if model["codegen_seconds_mean"] else "")
    print(f"  80% efficiency at {n} workers needs >= {needed:.1f} s of parallel work per job "
          f"(this job: {model['parallel_worker_seconds']:.1f} s{kernels}): (4N - 5) x the "
          f"serial tasks and 0.8 N x the critical path")
    print(f"  T1 (1 worker): {model['t1']:.3f} s warm, {model['t1_cold']:.3f} s cold; ready "
          f"actions {order}")
    print(f"  {'workers':>7} {'makespan':>9} {'speedup':>8} {'eff':>6} {'DAG-limit':>9} "
          f"{'vs-limit':>8} | {'cold':>8} {'cold eff':>8} | limited by")
    for r in model["results"]:
        print(f"  {r['workers']:>7} {r['makespan']:>7.3f} s {r['speedup']:>7.2f}x "
              f"{r['efficiency']:>6.1%} {r['dag_limit_efficiency']:>9.1%} "
              f"{r['efficiency_vs_limit']:>8.1%} | {r['cold_makespan']:>6.3f} s "
              f"{r['cold_efficiency']:>8.1%} | {'; '.join(r['limits'])}")
    last = model["results"][-1]
    print(f"  {last['cold_limit']}")


# Command line -----------------------------------------------------------------

def positive_int_list(text):
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"`{text}` is not a comma-separated list of worker "
                                         f"counts") from None
    bad = [v for v in values if not 1 <= v <= MAX_WORKERS]
    if bad:
        raise argparse.ArgumentTypeError(f"worker count {bad[0]} is not between 1 and "
                                         f"{MAX_WORKERS}")
    return values


def bounded(kind, low, high, low_open=False):
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"`{text}` is not a {kind.__name__}") from None
        if not math.isfinite(value) or value < low or value > high or \
                (low_open and value == low):
            lowest = f"above {low:g}" if low_open else f"at least {low:g}"
            raise argparse.ArgumentTypeError(f"{text} must be {lowest} and at most {high:g}")
        return value
    return parse


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trace", action="append", default=[], metavar="FILE",
                   help="a job's task trace (JSON, from `flowc jobs --json`); repeatable")
    p.add_argument("--synthetic", type=bounded(int, 1, MAX_TASKS - 2), metavar="N",
                   help="also simulate a plan, N codegen tasks and a link (the default "
                        "without --trace: 400)")
    p.add_argument("--workers", type=positive_int_list, default=[64, 128, 256, 512, 1024],
                   help="worker counts (default 64,128,256,512,1024)")
    p.add_argument("--latency-ms", type=bounded(float, 0, 10_000), default=1.0,
                   help="round-trip time between any two machines, ms (default 1)")
    p.add_argument("--bandwidth-gbps", type=bounded(float, 0, 1e6, low_open=True),
                   default=10.0, help="the daemon's and each worker's link, Gbit/s (default 10)")
    p.add_argument("--cas-bandwidth-gbps", type=bounded(float, 0, 1e6, low_open=True),
                   help="the CAS server's link, shared by all workers, Gbit/s (default: "
                        "--bandwidth-gbps)")
    p.add_argument("--cas-round-trips", type=bounded(int, 0, 1000), default=2,
                   help="daemon-to-CAS round trips per action before Execute "
                        "(GetActionResult, FindMissingBlobs; default 2)")
    p.add_argument("--worker-fetch-mb", type=bounded(float, 0, 1e6), default=70.0,
                   help="the toolchain each worker fetches before its first action, MB "
                        "(default 70: flowc-worker)")
    p.add_argument("--order", choices=["critical-path", "fifo"], default="critical-path",
                   help="order of ready actions (default critical-path)")
    p.add_argument("--resample", type=bounded(int, 0, MAX_TASKS - 10), default=400,
                   metavar="N", help="a trace with fewer codegen tasks is also simulated with N "
                   "resampled from its own (default 400; 0: never)")
    p.add_argument("--kernel-seconds", type=bounded(float, 0, MAX_SECONDS, low_open=True),
                   default=0.05, help="--synthetic: median codegen seconds (default 0.05)")
    p.add_argument("--kernel-sigma", type=bounded(float, 0, 5), default=0.8,
                   help="--synthetic: sigma of the log-normal codegen seconds (default 0.8)")
    p.add_argument("--plan-seconds", type=bounded(float, 0, MAX_SECONDS), default=0.3,
                   help="--synthetic: plan seconds (default 0.3)")
    p.add_argument("--link-seconds", type=bounded(float, 0, MAX_SECONDS), default=0.5,
                   help="--synthetic: link seconds (default 0.5)")
    p.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    if not args.trace and args.synthetic is None:
        args.synthetic = 400
    return args


def main(argv=None):
    args = parse_args(argv)
    bandwidth = args.bandwidth_gbps * 1e9 / 8
    net = Network(args.latency_ms / 1e3, bandwidth,
                  (args.cas_bandwidth_gbps or args.bandwidth_gbps) * 1e9 / 8,
                  args.cas_round_trips, int(args.worker_fetch_mb * 1e6))
    rng = random.Random(args.seed)
    try:
        traces = [load_trace(path) for path in args.trace]
    except InputError as e:
        print(f"remote_sim: error: {e}", file=sys.stderr)
        return 2
    dags, notes = [], []
    for dag in traces:
        dags.append(dag)
        kernels = dag.count("codegen")
        if kernels >= min(args.resample, SEVERAL_HUNDRED):
            continue
        again = resampled_dag(dag, args.resample, rng)
        notes.append(f"{dag.model}: {kernels} codegen tasks (distinct kernels missing from the "
                     f"cache), not the several hundred of the target; "
                     + (f"also simulated with {args.resample} resampled from them"
                        if again else "none to resample from"))
        if again:
            dags.append(again)
    if args.synthetic is not None:
        dags.append(synthetic_dag(args.synthetic, args, rng))
    try:
        models = [figures(dag, args.workers, net, args.order) for dag in dags]
    except InputError as e:
        print(f"remote_sim: error: {e}", file=sys.stderr)
        return 2
    network = {"round_trip_ms": args.latency_ms, "bandwidth_gbps": args.bandwidth_gbps,
               "cas_bandwidth_gbps": args.cas_bandwidth_gbps or args.bandwidth_gbps,
               "cas_round_trips": args.cas_round_trips, "worker_fetch_mb": args.worker_fetch_mb}
    if args.json:
        json.dump({"cpu": cpu_line(), "network": network, "notes": notes, "models": models},
                  sys.stdout, indent=1)
        print()
        return 0
    print(cpu_line())
    print(f"network: round trip {args.latency_ms:g} ms; {args.bandwidth_gbps:g} Gbit/s per "
          f"link (daemon, each worker); CAS link {network['cas_bandwidth_gbps']:g} Gbit/s shared "
          f"by the workers; {args.cas_round_trips} CAS round trips before each Execute; "
          f"toolchain {args.worker_fetch_mb:g} MB per cold worker")
    for note in notes:
        print(f"note: {note}")
    for model in models:
        print_model(model)
    return 0


if __name__ == "__main__":
    sys.exit(main())
