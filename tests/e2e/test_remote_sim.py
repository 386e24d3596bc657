"""bench/remote_sim.py: the remote-worker simulation's figures on DAGs small
enough to schedule by hand, its efficiency arithmetic, and its refusal of
bad traces (exit 2, a message naming the file, the task and the field)."""
import json
import subprocess
import sys

import pytest

from conftest import ROOT

SIM = ROOT / "bench" / "remote_sim.py"
# No network and no toolchain: makespans are the schedule's alone.
NO_NETWORK = ["--latency-ms", "0", "--worker-fetch-mb", "0"]


def sim(*args, check=True):
    result = subprocess.run([sys.executable, str(SIM), *map(str, args)], capture_output=True,
                            text=True, timeout=300)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def sim_json(*args):
    return json.loads(sim(*args, "--json").stdout)


def write(tmp_path, doc, name="trace.json"):
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def fan_out(codegen_seconds, plan=2.0, link=1.0, deps=True):
    """plan -> codegen x len(codegen_seconds) -> link, no bytes."""
    tasks = [{"id": "plan", "kind": "plan", "seconds": plan, "deps": []}]
    kernels = [f"codegen:k{i}" for i in range(len(codegen_seconds))]
    tasks += [{"id": k, "kind": "codegen", "seconds": s, "deps": ["plan"]}
              for k, s in zip(kernels, codegen_seconds)]
    tasks.append({"id": "link", "kind": "link", "seconds": link, "deps": kernels})
    if not deps:
        for t in tasks:
            del t["deps"]
    return {"model": "hand", "isa": "avx512f", "tasks": tasks}


def only_row(out):
    """The trace's own model (a resampled one follows it) and its one row."""
    model = out["models"][0]
    assert "resampled" not in model["model"]
    (row,) = model["results"]
    return model, row


def test_hand_schedule_and_efficiency(tmp_path):
    # plan 2 s on one worker, then 4 x 1 s codegen on 2 workers (2 s), then
    # a 1 s local link: 5 s. One worker: 2 + 4 + 1 = 7 s.
    out = sim_json("--trace", write(tmp_path, fan_out([1, 1, 1, 1])), "--workers", "2",
                   *NO_NETWORK)
    model, row = only_row(out)
    assert model["t1"] == pytest.approx(7.0)
    assert row["makespan"] == pytest.approx(5.0)
    assert row["speedup"] == pytest.approx(7 / 5)
    assert row["efficiency"] == pytest.approx(7 / (2 * 5))
    # The critical path is plan + one codegen + link = 4 s; plan and link
    # run alone (every other task runs before or after them), so the DAG
    # allows no less than 2 + 1 + 4 x 1 s / 2 workers = 5 s: reached.
    cp = model["critical_path"]
    assert cp["seconds"] == pytest.approx(4.0)
    assert (cp["plan"], cp["codegen"], cp["link"], cp["network"]) == \
        pytest.approx((2.0, 1.0, 1.0, 0.0))
    assert model["serial_seconds"] == {"plan": pytest.approx(2.0), "link": pytest.approx(1.0)}
    assert model["parallel_worker_seconds"] == pytest.approx(4.0)
    assert row["dag_limit"] == pytest.approx(5.0)
    assert row["dag_limit_efficiency"] == pytest.approx(7 / (2 * 5))
    assert row["efficiency_vs_limit"] == pytest.approx(1.0)
    assert row["limits"] == ["serial plan 2.00 s + link 1.00 s: 1 other worker idle meanwhile "
                             "(Amdahl)"]
    assert model["tasks"] == {"plan": 1, "codegen": 4, "link": 1}
    assert model["remote_tasks"] == 5


def test_deps_omitted_follow_the_kinds(tmp_path):
    explicit = sim_json("--trace", write(tmp_path, fan_out([1, 1, 1, 1]), "a.json"),
                        "--workers", "2,3", *NO_NETWORK)
    inferred = sim_json("--trace", write(tmp_path, fan_out([1, 1, 1, 1], deps=False), "b.json"),
                        "--workers", "2,3", *NO_NETWORK)
    assert [r["makespan"] for r in inferred["models"][0]["results"]] == \
        pytest.approx([5.0, 5.0])
    assert explicit["models"][0]["results"] == inferred["models"][0]["results"]


def test_critical_path_first_beats_arrival_order(tmp_path):
    # Kernels of 1, 1, 1 and 3 s on 2 workers: the 3 s one first ends at
    # 3 s (the other worker runs the three short ones); in arrival order
    # it starts at 1 s and ends at 4 s.
    trace = write(tmp_path, fan_out([1, 1, 1, 3], plan=0, link=0))
    _, first = only_row(sim_json("--trace", trace, "--workers", "2", *NO_NETWORK))
    _, fifo = only_row(sim_json("--trace", trace, "--workers", "2", "--order", "fifo",
                                *NO_NETWORK))
    assert first["makespan"] == pytest.approx(3.0)
    assert fifo["makespan"] == pytest.approx(4.0)
    # Both against the limit: the critical path (3 s) = 6 s of work / 2.
    assert (first["dag_limit"], fifo["dag_limit"]) == pytest.approx((3.0, 3.0))
    assert fifo["efficiency_vs_limit"] == pytest.approx(0.75)
    assert any(r.startswith("the schedule: 75% of the DAG's limit") for r in fifo["limits"])


def test_dag_limit_on_other_shapes(tmp_path):
    # Two independent kernels: neither runs alone in every schedule, so the
    # limit is the work over the workers or the longer kernel.
    pair = write(tmp_path, {"tasks": [{"id": "x", "kind": "codegen", "seconds": 1, "deps": []},
                                      {"id": "y", "kind": "codegen", "seconds": 3,
                                       "deps": []}]}, "pair.json")
    out = sim_json("--trace", pair, "--workers", "1,2", "--resample", "0", *NO_NETWORK)
    (model,) = out["models"]
    assert model["serial_seconds"] == {}
    assert [r["dag_limit"] for r in model["results"]] == pytest.approx([4.0, 3.0])
    assert [r["makespan"] for r in model["results"]] == pytest.approx([4.0, 3.0])
    # A chain: every task runs alone, the limit is the sum whatever N is.
    chain = write(tmp_path, {"tasks": [
        {"id": "p", "kind": "plan", "seconds": 1, "deps": []},
        {"id": "c", "kind": "codegen", "seconds": 2, "deps": ["p"]},
        {"id": "m", "kind": "measure", "seconds": 3, "deps": ["c"]}]}, "chain.json")
    out = sim_json("--trace", chain, "--workers", "4", "--resample", "0", *NO_NETWORK)
    model, row = only_row(out)
    assert model["serial_seconds"] == {"plan": pytest.approx(1.0), "codegen": pytest.approx(2.0),
                                       "measure": pytest.approx(3.0)}
    assert (row["dag_limit"], row["makespan"]) == pytest.approx((6.0, 6.0))


def test_network_model_by_hand(tmp_path):
    # One codegen task whose inputs the daemon uploads; 10 ms round trips,
    # 8 Gbit/s = 1e9 bytes/s, a 1 MB toolchain.
    trace = write(tmp_path, {"tasks": [{"id": "c", "kind": "codegen", "seconds": 1.0,
                                        "input_bytes": 2_000_000, "output_bytes": 3_000_000}]})
    out = sim_json("--trace", trace, "--workers", "1", "--latency-ms", "10",
                   "--bandwidth-gbps", "8", "--cas-round-trips", "2", "--worker-fetch-mb", "1")
    model, row = only_row(out)
    rtt, bw = 0.01, 1e9
    warm = (2 * rtt  # GetActionResult, FindMissingBlobs
            + 2e6 / bw + rtt  # the daemon uploads the inputs
            + 0.5 * rtt + 0.5 * rtt  # Execute reaches the engine; the lease the worker
            + 2e6 / bw + rtt  # the worker fetches the inputs
            + 1.0  # runs
            + 3e6 / bw + rtt  # uploads the outputs
            + rtt  # the Execute stream answers the daemon
            + 3e6 / bw + rtt)  # which fetches the outputs
    assert row["makespan"] == pytest.approx(warm, abs=1e-9)
    assert model["critical_path"]["seconds"] == pytest.approx(warm, abs=1e-9)
    assert model["critical_path"]["network"] == pytest.approx(warm - 1.0, abs=1e-9)
    # Cold: the worker first fetches the toolchain (one round trip, 1 MB).
    assert row["cold_makespan"] == pytest.approx(warm + rtt + 1e6 / bw, abs=1e-9)
    assert row["toolchain_fetches"] == 1
    assert "cold farm at 1 workers" in row["cold_limit"]


def test_synthetic_400_figures_are_consistent():
    out = sim_json("--synthetic", "400", "--workers", "1,64,256,1024")
    assert "ISA: avx2" in out["cpu"]
    (model,) = out["models"]
    assert model["tasks"] == {"plan": 1, "codegen": 400, "link": 1}
    assert "assumed, not measured" in model["source"]
    assert set(model["serial_seconds"]) == {"plan", "link"}
    t1, cp = model["t1"], model["critical_path"]["seconds"]
    # One worker: T1 is the work plus some of the network around each of
    # the 401 remote actions (~7 ms each at 1 ms round trips, part of it
    # overlapped with the worker's previous action).
    assert model["work_seconds"] < t1 < model["work_seconds"] + 401 * 0.007
    one = model["results"][0]
    assert one["makespan"] == pytest.approx(t1) and one["efficiency"] == pytest.approx(1.0)
    for row in model["results"]:
        n = row["workers"]
        limit = max(cp, sum(model["serial_seconds"].values())
                    + model["parallel_worker_seconds"] / n)
        assert row["dag_limit"] == pytest.approx(limit)
        assert row["makespan"] >= limit - 1e-9
        assert row["efficiency"] == pytest.approx(t1 / (n * row["makespan"]))
        assert row["dag_limit_efficiency"] == pytest.approx(min(1.0, t1 / (n * limit)))
        assert row["efficiency_vs_limit"] == pytest.approx(limit / row["makespan"])
        assert row["cold_makespan"] >= row["makespan"]
        assert 1 <= row["toolchain_fetches"] <= min(n, 401)
        assert row["limits"]
    assert any("too few tasks (401 remote for 1024 workers)" in r
               for r in model["results"][-1]["limits"])


def test_synthetic_is_deterministic_per_seed():
    a = sim("--synthetic", "50", "--workers", "8").stdout
    assert a == sim("--synthetic", "50", "--workers", "8").stdout
    assert a != sim("--synthetic", "50", "--workers", "8", "--seed", "2").stdout


def test_text_report(tmp_path):
    text = sim("--trace", write(tmp_path, fan_out([1, 1, 1, 1])), "--workers", "2,8",
               "--resample", "0", *NO_NETWORK).stdout
    assert text.startswith("CPU: ") and "ISA: avx2 " in text.splitlines()[0]
    assert "durations measured on avx512f" in text
    assert "critical path 4.000 s = plan 2.000 + longest codegen 1.000 + link 1.000 + " \
        "network 0.000" in text
    assert "too few tasks (5 remote for 8 workers)" in text


def test_few_kernels_are_said_and_resampled(tmp_path):
    # BERT's twelve layers share 7 distinct kernels: too few for the target.
    seconds = [0.02, 0.03, 0.04, 0.05, 0.06, 0.08, 0.1]
    out = sim_json("--trace", write(tmp_path, fan_out(seconds)), "--workers", "64")
    assert out["notes"] == ["hand: 7 codegen tasks (distinct kernels missing from the cache), "
                            "not the several hundred of the target; also simulated with 400 "
                            "resampled from them"]
    real, again = out["models"]
    assert real["tasks"]["codegen"] == 7
    assert again["model"] == "hand (resampled 400)"
    assert again["tasks"] == {"plan": 1, "codegen": 400, "link": 1}
    assert min(seconds) <= again["codegen_seconds_mean"] <= max(seconds)
    assert again["work_seconds"] == pytest.approx(3.0 + 400 * again["codegen_seconds_mean"])
    assert again["measured_on"] == "avx512f"


TASK = {"id": "c", "kind": "codegen", "seconds": 1}


@pytest.mark.parametrize("doc, message", [
    ("{", "not JSON: Expecting property name enclosed in double quotes at line 1 column 2"),
    ("[" * 100000 + "]" * 100000, "not JSON: nested too deeply"),
    (b"\xff\xfe", "not UTF-8 text (byte 0)"),
    ([], "the trace must be a JSON object with `tasks`, not a list"),
    ({"tasks": []}, "`tasks` must be a non-empty list of tasks"),
    ({"model": 3, "tasks": [TASK]}, "`model` must be a string"),
    ({"tasks": [7]}, "task 0: must be an object, not 7"),
    ({"tasks": [{**TASK, "id": ""}]}, "task 0: `id` must be a non-empty string"),
    ({"tasks": [TASK, TASK]}, "task 1 ('c'): duplicate id (also task 0)"),
    ({"tasks": [{**TASK, "kind": "compile"}]}, "task 0 ('c'): `kind` must be one of ingest, "
     "plan, codegen, measure, link, not \"compile\""),
    ({"tasks": [{"id": "c", "kind": "codegen"}]}, "task 0 ('c'): `seconds` is missing"),
    ({"tasks": [{**TASK, "seconds": -1}]}, "`seconds` must be between 0 and 1e+06, not -1"),
    ('{"tasks": [{"id": "c", "kind": "plan", "seconds": NaN}]}', "`seconds` must be between"),
    ('{"tasks": [{"id": "c", "kind": "plan", "seconds": 1e400}]}', "`seconds` must be between"),
    ({"tasks": [{**TASK, "seconds": "1"}]}, "`seconds` must be a number, not \"1\""),
    ({"tasks": [{**TASK, "input_bytes": True}]}, "`input_bytes` must be a number, not true"),
    ({"tasks": [{**TASK, "output_bytes": 1.5}]}, "`output_bytes` must be a whole number"),
    ({"tasks": [{**TASK, "output_bytes": 10**30}]}, "`output_bytes` must be between 0 and"),
    ({"tasks": [{**TASK, "local": "yes"}]}, "`local` must be true or false"),
    ({"tasks": [{**TASK, "sconds": 1}]}, "task 0 ('c'): unknown field `sconds`"),
    ({"tasks": [{**TASK, "deps": "plan"}]}, "task 0 ('c'): `deps` must be a list of task ids"),
    ({"tasks": [{**TASK, "deps": ["plan"]}]}, "task 0 ('c'): dep \"plan\" is no task"),
    ({"tasks": [{**TASK, "deps": ["c"]}]}, "task 0 ('c'): depends on itself"),
    ({"tasks": [{**TASK, "deps": []}, {**TASK, "id": "d"}]},
     "task 1 ('d'): no `deps` while other tasks have them"),
    ({"tasks": [{**TASK, "deps": ["d"]}, {**TASK, "id": "d", "deps": ["e"]},
                {**TASK, "id": "e", "deps": ["c"]}]},
     "the deps form a cycle (3 tasks never become ready: 'c', 'd', 'e')"),
], ids=lambda v: None if isinstance(v, str) and len(v) < 60 else "doc")
def test_bad_trace_is_refused(tmp_path, doc, message):
    path = tmp_path / "bad.json"
    if isinstance(doc, bytes):
        path.write_bytes(doc)
    else:
        write(tmp_path, doc, "bad.json")
    result = sim("--trace", path, check=False)
    assert result.returncode == 2, result.stdout
    assert result.stderr.startswith(f"remote_sim: error: {path}: "), result.stderr
    assert message in result.stderr
    assert result.stdout == ""


def test_trace_without_work_is_refused(tmp_path):
    path = write(tmp_path, {"tasks": [{"id": "link", "kind": "link", "seconds": 0}]})
    result = sim("--trace", path, check=False)
    assert result.returncode == 2
    assert result.stderr == f"remote_sim: error: trace {path}: nothing to schedule: every " \
        f"task takes 0 s and no network time\n"


def test_missing_trace_is_refused(tmp_path):
    result = sim("--trace", tmp_path / "none.json", check=False)
    assert result.returncode == 2
    assert result.stderr == f"remote_sim: error: {tmp_path / 'none.json'}: cannot read the " \
        f"trace: No such file or directory\n"


@pytest.mark.parametrize("args, message", [
    (["--workers", "64,x"], "`64,x` is not a comma-separated list of worker counts"),
    (["--workers", "0"], "worker count 0 is not between 1 and 65536"),
    (["--bandwidth-gbps", "0"], "0 must be above 0"),
    (["--latency-ms", "nan"], "nan must be at least 0"),
    (["--synthetic", "0"], "0 must be at least 1"),
    (["--order", "random"], "invalid choice: 'random'"),
])
def test_bad_options_are_refused(args, message):
    result = sim(*args, check=False)
    assert result.returncode == 2
    assert message in result.stderr, result.stderr
