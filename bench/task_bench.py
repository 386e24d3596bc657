#!/usr/bin/env python3
"""Cold compile wall time of real models, in the same run: in process
(`flowc compile`, no daemon), through flowcd with 1 and with 2 local worker
processes, and through flowcd on BuildGrid with 2 bots on this machine.
Also writes each compile's task DAG, with measured durations and bytes, as
a trace for bench/remote_sim.py. Prints figures; asserts nothing.

    .venv/bin/python bench/task_bench.py [--models convnext_tiny,bert]
        [--workdir DIR] [--no-remote] [--trace-dir DIR]

Models are exported once into WORKDIR (torchvision's with Debian's torch,
BERT with .venv-export) and kept there between runs.
"""
import argparse
import json
import os
import pathlib
import platform
import signal
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
BIN = ROOT / "build" / "bin"
TRANSFORMERS = {"bert", "gpt2"}
sys.path.insert(0, str(ROOT / "bench"))
from hostinfo import cpu_line  # noqa: E402


def export(name, workdir):
    path = workdir / f"{name}.onnx"
    if path.exists():
        return path
    if name in TRANSFORMERS:
        cmd = [str(ROOT / ".venv-export" / "bin" / "python"),
               str(ROOT / "examples" / "export_transformers.py"), str(workdir), "--models", name,
               "--opset", "17", "--batch", "1", "--seq", "128"]
    else:
        cmd = ["/usr/bin/python3", str(ROOT / "examples" / "export_torchvision.py"),
               str(workdir), "--models", name, "--opset", "17", "--batch", "1"]
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=1800)
    return path


def flowc(cache, socket, *args):
    result = subprocess.run([str(BIN / "flowc"), "--cache-dir", str(cache), "--socket",
                             str(socket), *map(str, args)], capture_output=True, text=True,
                            timeout=3600)
    if result.returncode != 0:
        raise RuntimeError(f"flowc {' '.join(map(str, args))} failed "
                           f"({result.returncode}): {result.stderr.strip()}")
    return result


class Daemon:
    def __init__(self, where, *flags):
        where.mkdir(parents=True, exist_ok=True)
        self.cache, self.socket = where / "cache", where / "flowcd.sock"
        self.process = subprocess.Popen(
            [str(BIN / "flowcd"), "--cache-dir", str(self.cache), "--socket", str(self.socket),
             "--log-file", str(where / "flowcd.log"), *map(str, flags)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while not self.socket.exists() and time.monotonic() < deadline:
            time.sleep(0.05)

    def submit(self, model, out, *flags):
        start = time.perf_counter()
        result = json.loads(flowc(self.cache, self.socket, "submit", model, "-o", out,
                                  "--json", *flags).stdout)
        return time.perf_counter() - start, result

    def jobs(self):
        return json.loads(flowc(self.cache, self.socket, "jobs", "--json").stdout)["jobs"]

    def workers(self):
        return json.loads(flowc(self.cache, self.socket, "workers", "--json").stdout)

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=120)


def trace_of(name, job):
    """The job as bench/remote_sim.py reads it: ingest (local, until the plan
    was queued), plan, the codegen tasks, link (local, from the last task's
    end to the job's end)."""
    plan = [t for t in job["tasks"] if t["kind"] == "plan"]
    codegen = [t for t in job["tasks"] if t["kind"] == "codegen"]
    tasks_end = max(t["queued_at_seconds"] + t["seconds"] for t in job["tasks"])
    tasks = [{"id": "ingest", "kind": "ingest", "seconds": plan[0]["queued_at_seconds"],
              "deps": []},
             {"id": "plan", "kind": "plan", "seconds": plan[0]["seconds"],
              "input_bytes": plan[0]["input_bytes"], "output_bytes": plan[0]["output_bytes"],
              "deps": ["ingest"]}]
    for t in codegen:
        tasks.append({"id": "codegen:" + t["name"], "kind": "codegen", "seconds": t["seconds"],
                      "input_bytes": t["input_bytes"], "output_bytes": t["output_bytes"],
                      "deps": ["plan"]})
    tasks.append({"id": "link", "kind": "link",
                  "seconds": max(0.0, job["seconds"] - tasks_end),
                  "deps": [t["id"] for t in tasks if t["kind"] == "codegen"] or ["plan"]})
    return {"model": name, "isa": cpu_line(), "tasks": tasks}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="convnext_tiny,bert")
    parser.add_argument("--workdir", type=pathlib.Path,
                        default=pathlib.Path("/tmp/flowc-task-bench"))
    parser.add_argument("--no-remote", action="store_true",
                        help="leave out BuildGrid (needs .venv-reapi and PostgreSQL)")
    parser.add_argument("--trace-dir", type=pathlib.Path, default=None,
                        help="where MODEL.trace.json goes (default: WORKDIR)")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    trace_dir = args.trace_dir or args.workdir
    print(cpu_line())
    print(f"flowc {subprocess.run([str(BIN / 'flowc-worker'), '--version'], capture_output=True, text=True).stdout.splitlines()[0]}, python {platform.python_version()}")
    cluster = None
    if not args.no_remote:
        sys.path.insert(0, str(ROOT / "tests" / "reapi"))
        from cluster import BuildGridCluster
        cluster = BuildGridCluster(args.workdir / f"reapi.{os.getpid()}", bots=2)
        cluster.start()
    try:
        header = (f"{'model':14} {'kernels':>7} {'in-process':>11} {'1 worker':>9} "
                  f"{'2 workers':>10} {'BuildGrid 2 bots':>17}")
        rows = []
        for name in args.models.split(","):
            model = export(name, args.workdir)
            run = args.workdir / f"run.{os.getpid()}.{name}"
            run.mkdir(parents=True, exist_ok=True)
            start = time.perf_counter()
            compiled = json.loads(flowc(run / "alone", run / "none.sock", "compile", model,
                                        "-o", run / "alone.fca", "--json").stdout)
            in_process = time.perf_counter() - start
            seconds = {}
            for workers in (1, 2):
                d = Daemon(run / f"w{workers}", "--workers", workers)
                seconds[workers], result = d.submit(model, run / f"w{workers}.fca")
                assert result["artifact_digest"] == compiled["artifact_digest"]
                if workers == 2:
                    [job] = d.jobs()
                    path = trace_dir / f"{name}.trace.json"
                    path.write_text(json.dumps(trace_of(name, job), indent=1))
                d.stop()
            remote = "-"
            if cluster:
                d = Daemon(run / "remote", "--remote-executor", cluster.url,
                           "--remote-instance", cluster.instance)
                elapsed, result = d.submit(model, run / "remote.fca")
                executed = d.workers()["remote"]["executed"]
                d.stop()
                assert result["artifact_digest"] == compiled["artifact_digest"]
                remote = f"{elapsed:.1f} s ({executed} actions)"
            rows.append(f"{name:14} {compiled['kernels_compiled']:>7} {in_process:>9.1f} s "
                        f"{seconds[1]:>7.1f} s {seconds[2]:>8.1f} s {remote:>17}")
            subprocess.run(["rm", "-rf", str(run)], check=False)
        print(header)
        for row in rows:
            print(row)
        print("(cold compiles: an empty cache each; the same artifact digest in every column;"
              f" traces for bench/remote_sim.py in {trace_dir})")
    finally:
        if cluster:
            cluster.stop()


if __name__ == "__main__":
    main()
