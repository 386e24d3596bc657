"""A real REAPI engine on loopback for flowc's tests: BuildGrid 0.9.1 on
PostgreSQL 15, plus bots (tests/reapi/bot.py) on the Bots API.

This module only spawns processes, so it imports under any Python >= 3.9
(the e2e suite runs on Python 3.11; BuildGrid needs 3.13 and lives in
.venv-reapi, made by scripts/setup.sh test).

    cluster = BuildGridCluster(tmp_path / "reapi", bots=2)
    cluster.start()          # PostgreSQL, BuildGrid, the bots; raises with logs
    cluster.url              # "grpc://127.0.0.1:PORT", instance cluster.instance
    cluster.kill_bot("bot1") # SIGKILL the bot and the command it runs
    cluster.executions()     # commands the bots actually ran
    cluster.stop()           # everything down; safe to call twice

The engine runs CAS, ByteStream, ActionCache, Execution (+ Operations),
Bots and Capabilities on one TCP port. A bot that stops calling back is
declared dead after `keepalive_s` (default 10 s) and its lease requeued.
"""

import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PG_BIN = Path("/usr/lib/postgresql/15/bin")
DEFAULT_PLATFORM = {"OSFamily": "linux", "ISA": "x86-64"}
START_TIMEOUT_S = 60.0


class ClusterError(RuntimeError):
    pass


def reapi_venv():
    """The venv holding BuildGrid (FLOWC_REAPI_VENV, else REPO/.venv-reapi)."""
    venv = Path(os.environ.get("FLOWC_REAPI_VENV", REPO / ".venv-reapi"))
    if not (venv / "bin" / "bgd").exists():
        raise ClusterError(f"no BuildGrid in {venv} (bin/bgd missing): run scripts/setup.sh test")
    return venv


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tail(path, lines=40):
    try:
        text = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return f"({path}: not written)"
    return "\n".join(text[-lines:])


def stop_group(proc, sig=signal.SIGTERM, grace_s=10.0):
    """Signals the process group the process leads, then SIGKILLs what is left."""
    if proc is None:
        return
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    # The leader may be gone while its children are not.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def wait_until(ready, proc, what, log_path, timeout_s=START_TIMEOUT_S):
    """Polls ready() until true; ClusterError with the log's tail if `proc`
    exits first or `timeout_s` passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ClusterError(f"{what} exited with {proc.returncode} while starting:\n{tail(log_path)}")
        if ready():
            return
        time.sleep(0.2)
    raise ClusterError(f"{what} not ready after {timeout_s:g} s:\n{tail(log_path)}")


def yaml_str(s):
    return json.dumps(str(s))  # a JSON string is a YAML double-quoted scalar


class BuildGridCluster:
    def __init__(self, workdir, bots=2, instance="main", keepalive_s=10, platform=None, wildcard_keys=(),
                 bot_platform=None):
        """bots: how many start() launches (bot1..botN). instance: the REAPI
        instance name every service answers on. platform: the properties
        each bot advertises, which are also the keys actions may match on;
        bot_platform: further properties of some bots ({"bot2": {"gpu":
        "NVIDIA H200 sm_90"}}), their keys matched too; wildcard_keys:
        further property names actions may carry that do not steer
        scheduling (BuildGrid rejects an action naming any other)."""
        self.workdir = Path(workdir).resolve()
        self.bot_count = bots
        self.instance = instance
        self.keepalive_s = keepalive_s
        if keepalive_s < 4:
            # BuildGrid gives a long-polling bot 0.8 x keepalive and refuses
            # to assign leases when that is under 3 s.
            raise ValueError("keepalive_s must be >= 4")
        self.platform = dict(DEFAULT_PLATFORM if platform is None else platform)
        self.wildcard_keys = list(wildcard_keys)
        self.bot_platform = {name: dict(props) for name, props in (bot_platform or {}).items()}
        self.port = None
        self.venv = None
        self._pg = None
        self._pg_dir = None
        self._server = None
        self._bots = {}
        self.execution_log = self.workdir / "executions.log"
        self.server_log = self.workdir / "bgd.log"
        self.pg_log = self.workdir / "postgres.log"

    @property
    def url(self):
        return f"grpc://127.0.0.1:{self.port}"

    # --- lifecycle -------------------------------------------------------

    def start(self):
        self.venv = reapi_venv()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.execution_log.touch()
        try:
            self._start_postgres()
            self.port = free_port()
            self._write_config()
            self.start_server()
            for i in range(self.bot_count):
                self.start_bot(f"bot{i + 1}")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self):
        """Everything down, each part even if another fails; idempotent."""
        parts = [lambda name=name: stop_group(self._bots.pop(name)[0], grace_s=5) for name in list(self._bots)]
        errors = []
        for part in parts + [self.stop_server, self._stop_postgres]:
            try:
                part()
            except Exception as e:  # noqa: BLE001 - the other parts must still go down
                errors.append(e)
        if errors:
            raise errors[0]

    def _stop_postgres(self):
        if self._pg is not None:
            # SIGINT: PostgreSQL's fast shutdown.
            stop_group(self._pg, sig=signal.SIGINT, grace_s=15)
            self._pg = None
        if self._pg_dir is not None:
            shutil.rmtree(self._pg_dir, ignore_errors=True)
            self._pg_dir = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # --- PostgreSQL ------------------------------------------------------

    def _start_postgres(self):
        for tool in ("initdb", "postgres", "psql"):
            if not (PG_BIN / tool).exists():
                raise ClusterError(f"{PG_BIN / tool} missing: install postgresql-15 (scripts/setup.sh test)")
        # PostgreSQL refuses to run as root; its files live where the
        # postgres user can reach them (a pytest tmp_path is root-only).
        self._pg_user = "postgres" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
        self._pg_dir = Path(tempfile.mkdtemp(prefix="flowc-pg-"))
        os.chmod(self._pg_dir, 0o755)
        data, self._pg_sock = self._pg_dir / "data", self._pg_dir / "sock"
        data.mkdir()
        self._pg_sock.mkdir()
        user = pwd.getpwnam(self._pg_user)
        for p in (self._pg_dir, data, self._pg_sock):
            os.chown(p, user.pw_uid, user.pw_gid)
        as_pg = dict(user=user.pw_uid, group=user.pw_gid, extra_groups=[]) if os.geteuid() == 0 else {}
        with open(self.pg_log, "wb") as log:
            rc = subprocess.run(
                [PG_BIN / "initdb", "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"],
                cwd=self._pg_dir,
                stdout=log, stderr=subprocess.STDOUT, timeout=120, **as_pg,
            ).returncode
        if rc != 0:
            raise ClusterError(f"initdb failed ({rc}):\n{tail(self.pg_log)}")
        self._pg_port = 5432  # names the socket file only: no TCP listener
        log = open(self.pg_log, "ab")
        self._pg = subprocess.Popen(
            [PG_BIN / "postgres", "-D", data, "-k", self._pg_sock, "-p", str(self._pg_port),
             "-c", "listen_addresses=", "-c", "fsync=off", "-c", "synchronous_commit=off",
             "-c", "full_page_writes=off", "-c", "max_connections=200"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=self._pg_dir, **as_pg,
        )
        log.close()
        self._wait(lambda: self._psql("select 1") == "1", self._pg, "PostgreSQL", self.pg_log)
        self.db_url = f"postgresql+psycopg://postgres@/postgres?host={self._pg_sock}&port={self._pg_port}"
        out = subprocess.run(
            [self.venv / "bin" / "bgd", "migrate", "apply", self.db_url],
            capture_output=True, text=True, timeout=120,
        )
        if out.returncode != 0:
            raise ClusterError(f"bgd migrate apply failed ({out.returncode}):\n{out.stdout}{out.stderr}")

    def _psql(self, sql):
        out = subprocess.run(
            [PG_BIN / "psql", "-h", self._pg_sock, "-p", str(self._pg_port), "-U", "postgres", "-d", "postgres",
             "-Atqc", sql],
            capture_output=True, text=True, timeout=30,
        )
        return out.stdout.strip() if out.returncode == 0 else None

    # --- BuildGrid -------------------------------------------------------

    def _write_config(self):
        cas = self.workdir / "cas"
        cas.mkdir(exist_ok=True)
        match = sorted(set(self.platform).union(*self.bot_platform.values()))
        config = f"""\
server:
  - !channel
    address: "127.0.0.1:{self.port}"
    insecure-mode: true
grpc-server-options:
  grpc.so_reuseport: 0
authorization:
  method: none
connections:
  - !sql-connection &sql
    connection-string: {yaml_str(self.db_url)}
    pool-size: 10
    pool-timeout: 30
    max-overflow: 20
storages:
  - !disk-storage &cas
    path: {yaml_str(cas)}
caches:
  - !lru-action-cache &ac
    storage: *cas
    max-cached-refs: 100000
    allow-updates: true
    cache-failed-actions: false
schedulers:
  - !sql-scheduler &scheduler
    sql: *sql
    storage: *cas
    action-cache: *ac
    bot-session-keepalive-timeout: {self.keepalive_s}
    session-expiry-timer-interval: 1
    max-job-attempts: 3
    poll-interval: 0.2
    bot-poll-interval: 0.2
    property-set: !dynamic-property-set
      match-property-keys: {json.dumps(match)}
      wildcard-property-keys: {json.dumps(self.wildcard_keys)}
    assigners:
      - !priority-age-assigner
        count: 1
        interval: 0.1
        priority-assignment-percentage: 100
        bot-assignment-strategy: !assign-by-capacity
          sampling: !sampling-config
            sample-size: 8
            max-attempts: 3
instances:
  - name: {yaml_str(self.instance)}
    services:
      - !action-cache
        cache: *ac
      - !execution
        scheduler: *scheduler
        operation-stream-keepalive-timeout: 5
      - !cas
        storage: *cas
      - !bytestream
        storage: *cas
# Each Execute/WaitExecution stream holds a server thread while its action
# runs: room for a daemon's --remote-jobs and the bots' long polls.
thread-pool-size: 128
"""
        self.config = self.workdir / "bgd.yml"
        self.config.write_text(config)

    def start_server(self):
        """(Re)starts BuildGrid on the same port, database and CAS."""
        if self._server is not None and self._server.poll() is None:
            return
        with open(self.server_log, "ab") as log:
            self._server = subprocess.Popen(
                [self.venv / "bin" / "bgd", "server", "start", self.config],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=self.workdir,
            )
        self._wait(self._server_answers, self._server, "BuildGrid", self.server_log)

    def _server_answers(self):
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
        except OSError:
            return False
        probe = (
            "import grpc,sys\n"
            "from buildgrid._protos.build.bazel.remote.execution.v2 import remote_execution_pb2 as r, "
            "remote_execution_pb2_grpc as g\n"
            "c=grpc.insecure_channel(sys.argv[1])\n"
            "g.CapabilitiesStub(c).GetCapabilities(r.GetCapabilitiesRequest(instance_name=sys.argv[2]),timeout=5)\n"
        )
        out = subprocess.run(
            [self.venv / "bin" / "python", "-c", probe, f"127.0.0.1:{self.port}", self.instance],
            capture_output=True, timeout=30,
        )
        return out.returncode == 0

    def stop_server(self):
        """BuildGrid down (SIGTERM, then SIGKILL); the database and bots stay."""
        if self._server is not None:
            stop_group(self._server, grace_s=10)
            self._server = None

    # --- bots ------------------------------------------------------------

    def start_bot(self, name):
        if name in self._bots and self._bots[name][0].poll() is None:
            raise ClusterError(f"bot {name} already runs")
        bot_dir = self.workdir / "bots" / name
        bot_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.workdir / "bots" / f"{name}.log"
        cmd = [
            self.venv / "bin" / "python", REPO / "tests" / "reapi" / "bot.py",
            "--url", self.url, "--instance", self.instance, "--name", name,
            "--workdir", bot_dir, "--log", self.execution_log,
        ]
        for k, v in sorted({**self.platform, **self.bot_platform.get(name, {})}.items()):
            cmd += ["--property", f"{k}={v}"]
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self._bots[name] = (proc, log_path)
        # Ready once the scheduler has the bot's session.
        self._wait(
            lambda: (self._psql(f"select count(*) from bots where bot_id = '{name}'") or "0") != "0",
            proc, f"bot {name}", log_path,
        )

    def kill_bot(self, name):
        """SIGKILL: the bot and the command it runs die at once, as with a lost machine."""
        proc, _ = self._bots.pop(name)
        stop_group(proc, sig=signal.SIGKILL, grace_s=5)

    def bots(self):
        return [n for n, (p, _) in self._bots.items() if p.poll() is None]

    def bot_pids(self):
        """{name: pid} of the running bots (the parents of the commands they run)."""
        return {n: p.pid for n, (p, _) in self._bots.items() if p.poll() is None}

    # --- what happened ---------------------------------------------------

    def execution_records(self):
        """(action "HASH/SIZE", bot, exit code) for each command a bot ran."""
        records = []
        for line in self.execution_log.read_text().splitlines():
            digest, bot, code = line.split()
            records.append((digest, bot, int(code)))
        return records

    def executions(self):
        return len(self.execution_records())

    def logs(self, lines=40):
        parts = [f"== BuildGrid ({self.server_log})\n{tail(self.server_log, lines)}",
                 f"== PostgreSQL ({self.pg_log})\n{tail(self.pg_log, lines // 2)}"]
        bot_logs = sorted((self.workdir / "bots").glob("*.log")) if (self.workdir / "bots").exists() else []
        parts += [f"== {p.stem} ({p})\n{tail(p, lines)}" for p in bot_logs]
        parts.append(f"== executions\n{tail(self.execution_log, lines)}")
        return "\n".join(parts)

    # ---------------------------------------------------------------------

    def _wait(self, ready, proc, what, log_path, timeout_s=START_TIMEOUT_S):
        wait_until(ready, proc, what, log_path, timeout_s)


def cluster_fixture(bots=2, scope="function", **kwargs):
    """A pytest fixture yielding a started BuildGridCluster, stopped after use:
        from tests.reapi.cluster import cluster_fixture   (or via sys.path)
        buildgrid = cluster_fixture(bots=3)
    """
    import pytest

    @pytest.fixture(scope=scope)
    def fixture(tmp_path_factory):
        cluster = BuildGridCluster(tmp_path_factory.mktemp("reapi"), bots=bots, **kwargs)
        cluster.start()
        try:
            yield cluster
        finally:
            cluster.stop()

    return fixture
