#!/usr/bin/env python3
"""How fast a job stops when asked to, and what a superseded job leaves in
the kernel cache (docs/jobs.md). Prints figures; asserts nothing.

    .venv/bin/python bench/cancel_bench.py [--blocks 48] [--workers 1]

The model is tests/e2e's elementwise chain (BLOCKS blocks, each a few
distinct loop kernels), compiled by a fresh daemon with WORKERS task
processes. Figures, each from the moment the daemon's first codegen task
of the job is seen running (polled through `flowc jobs`, every 10 ms):
- cold: the same compile left alone, its wall time (the reference);
- cancel: `flowc cancel JOB`, until the submit exits, and until the job's
  worker and task processes are gone;
- client killed: SIGKILL of `flowc submit`, until the job is `cancelled`
  and its processes are gone;
- supersede: a save of another graph at the same path and its submit by the
  same client, until the older submit exits; the older job's codegen tasks
  that finished, and `kernels_reused` when the first version is submitted
  again.
"""
import argparse
import json
import pathlib
import signal
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
BIN = ROOT / "build" / "bin"
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
sys.path.insert(0, str(ROOT / "examples"))
from hostinfo import cpu_line  # noqa: E402
from test_isolation import workers_of  # noqa: E402
from test_tasks import elementwise_chain, relu_model  # noqa: E402


class Daemon:
    def __init__(self, where: pathlib.Path, workers: int):
        where.mkdir(parents=True)
        self.where = where
        self.cache, self.socket = where / "cache", where / "flowcd.sock"
        self.process = subprocess.Popen(
            [str(BIN / "flowcd"), "--cache-dir", str(self.cache), "--socket",
             str(self.socket), "--log-file", str(where / "flowcd.log"), "--workers",
             str(workers)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while not self.socket.exists() and time.monotonic() < deadline:
            time.sleep(0.05)

    def args(self, *rest):
        return [str(BIN / "flowc"), "--cache-dir", str(self.cache), "--socket",
                str(self.socket), *map(str, rest)]

    def run(self, *rest):
        return subprocess.run(self.args(*rest), capture_output=True, text=True, timeout=600)

    def submit(self, model):
        return subprocess.Popen(self.args("submit", model, "-o", model.with_suffix(".fca"),
                                          "--json"),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def jobs(self):
        return json.loads(self.run("jobs", "--json").stdout)["jobs"]

    def job(self, job_id):
        return next(j for j in self.jobs() if j["id"] == job_id)

    def idle(self):
        local = json.loads(self.run("workers", "--json").stdout)["local"]
        return not local and not workers_of(self.process.pid)

    def codegen_running(self):
        """The running job once one of its codegen tasks runs."""
        while True:
            for job in self.jobs():
                if job["state"] == "running" and any(
                        t["kind"] == "codegen" and t["state"] == "running"
                        for t in job["tasks"]):
                    return job
            time.sleep(0.01)

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=120)


def until(predicate, start):
    while not predicate():
        time.sleep(0.01)
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=48)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    print(cpu_line())
    print(f"model: elementwise chain of {args.blocks} blocks; {args.workers} task "
          f"process(es)")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)

        d = Daemon(tmp / "cold", args.workers)
        model = elementwise_chain(tmp / "cold.onnx", blocks=args.blocks)
        start = time.perf_counter()
        out = json.loads(d.run("submit", model, "-o", tmp / "cold.fca", "--json").stdout)
        print(f"cold compile: {time.perf_counter() - start:.2f} s, "
              f"{out['kernels_compiled']} kernels compiled")
        d.stop()

        d = Daemon(tmp / "cancel", args.workers)
        model = elementwise_chain(tmp / "cancel.onnx", blocks=args.blocks)
        submit = d.submit(model)
        job = d.codegen_running()
        start = time.perf_counter()
        d.run("cancel", job["id"])
        exited = until(lambda: submit.poll() is not None, start)
        gone = until(d.idle, start)
        print(f"flowc cancel: submit exited (rc {submit.returncode}) after "
              f"{exited * 1000:.0f} ms, processes gone after {gone * 1000:.0f} ms")
        d.stop()

        d = Daemon(tmp / "kill", args.workers)
        model = elementwise_chain(tmp / "kill.onnx", blocks=args.blocks)
        submit = d.submit(model)
        job = d.codegen_running()
        start = time.perf_counter()
        submit.send_signal(signal.SIGKILL)
        cancelled = until(lambda: d.job(job["id"])["state"] == "cancelled", start)
        gone = until(d.idle, start)
        print(f"client SIGKILL: job cancelled after {cancelled * 1000:.0f} ms, "
              f"processes gone after {gone * 1000:.0f} ms")
        d.stop()

        d = Daemon(tmp / "supersede", args.workers)
        model = tmp / "model.onnx"
        elementwise_chain(model, blocks=args.blocks)
        first_version = model.read_bytes()
        older = d.submit(model)
        job = d.codegen_running()
        relu_model(tmp / "relu.onnx").replace(model)
        start = time.perf_counter()
        newer = d.submit(model)
        exited = until(lambda: older.poll() is not None, start)
        newer.communicate(timeout=600)
        until(lambda: d.job(job["id"])["state"] == "superseded", start)
        tasks = d.job(job["id"])["tasks"]
        finished = sum(t["kind"] == "codegen" and t["state"] == "done" for t in tasks)
        model.write_bytes(first_version)
        again = json.loads(d.run("submit", model, "-o", tmp / "again.fca", "--json").stdout)
        verify = json.loads(d.run("cache", "verify", "--json").stdout)
        print(f"supersede: older submit exited (rc {older.returncode}) "
              f"{exited * 1000:.0f} ms after the newer submit began; the older job "
              f"finished {finished} codegen task(s); the first version again: "
              f"{again['kernels_reused']} kernels reused, {again['kernels_compiled']} "
              f"compiled; cache verify ok: {verify['ok']}")
        d.stop()


if __name__ == "__main__":
    main()
