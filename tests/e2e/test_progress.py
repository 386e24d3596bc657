"""Structured progress and errors as JSON (docs/progress.md): the NDJSON
stream of a real cold compile checked against the schema the doc itself
states (so doc and test cannot drift), the terminal line that redraws only
on a terminal, and `--json` errors with the file, node and op at fault."""
import json
import os
import pathlib
import pty
import re
import select
import subprocess

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from conftest import BIN, ROOT, leaky_cnn, save

BAD, USAGE = 3, 2
DOC = ROOT / "docs" / "progress.md"
TYPES = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
}
TYPES["number or null"] = lambda v: v is None or TYPES["number"](v)


def doc_table(name):
    """The rows of the table between <!-- schema:NAME --> and its end, as
    lists of cells with the backquotes around names taken off."""
    text = DOC.read_text()
    body = re.search(rf"<!-- schema:{name} -->\n(.*?)<!-- /schema:{name} -->", text, re.S)
    assert body, f"docs/progress.md has no schema:{name} table"
    rows = []
    for line in body.group(1).splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows.append([cells[0].strip("`")] + cells[1:])
    return rows


def event_schema():
    """event type -> {field: (type, required)} from the doc's fields table."""
    schema = {}
    for field, kind, events, _ in doc_table("fields"):
        assert kind in TYPES, f"docs/progress.md: unknown type {kind!r} of {field}"
        for event in (e.strip() for e in events.split(",")):
            optional = event.endswith("?")
            schema.setdefault(event.rstrip("?"), {})[field] = (kind, not optional)
    return schema


def check_fields(obj, fields, where):
    """`obj` has every required field and no undocumented one, each of its
    documented type."""
    for field, (kind, required) in fields.items():
        if required:
            assert field in obj, f"{where}: no {field!r} in {obj}"
    for field, value in obj.items():
        assert field in fields, f"{where}: {field!r} is not documented: {obj}"
        assert TYPES[fields[field][0]](value), \
            f"{where}: {field}={value!r} is not a {fields[field][0]}"


def check_error_object(error):
    fields = {field: (kind, True) for field, kind, _ in doc_table("error")}
    check_fields(error, fields, "error object")


def flowc_cmd(flowc, *args):
    return [str(BIN / "flowc"), "--cache-dir", str(flowc.cache_dir), "--socket",
            str(flowc.socket), *map(str, args)]


def cnn(tmp_path, seed=0):
    """A CNN with one generated kernel: compiles have a codegen phase."""
    return save(leaky_cnn(np.random.default_rng(seed)), tmp_path / "cnn.onnx")


def zero_strides_model(path):
    """A Conv whose strides are 0: refused at import, naming node and op."""
    weight = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="conv0", strides=[0, 0])],
        "bad", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())
    return path


def test_a_cold_compile_streams_events_of_the_documented_schema(flowc, tmp_path):
    model = cnn(tmp_path)
    result = flowc.run("submit", model, "-o", tmp_path / "cnn.fca", "--progress=json")
    lines = result.stdout.splitlines()
    # Piped: nothing on stderr but errors, and none here.
    assert result.stderr == ""
    events = [json.loads(line) for line in lines]
    schema = event_schema()
    for number, event in enumerate(events):
        assert event["event"] in schema, event
        check_fields(event, schema[event["event"]], f"line {number + 1}")
    types = [e["event"] for e in events]
    # At most one accepted, first; one result, last; nothing after it.
    assert types.count("accepted") <= 1 and "accepted" not in types[1:]
    assert types.count("result") == 1 and types[-1] == "result"
    assert "error" not in types
    assert events[-1]["job_id"] != ""
    if types[0] == "accepted":
        assert events[0]["job_id"] == events[-1]["job_id"]

    # Kernels 1..n of n, the count announced by the codegen phase first.
    kernels = [e for e in events if e["event"] == "kernel"]
    n = events[-1]["kernels_compiled"]
    assert n > 0 and [k["index"] for k in kernels] == list(range(1, n + 1))
    assert {k["count"] for k in kernels} == {n}
    codegen = [e for e in events if e["event"] == "phase" and e["phase"] == "codegen"]
    assert len(codegen) == 1 and codegen[0]["count"] == n
    assert types.index("phase", 0) < types.index("kernel")
    assert events.index(codegen[0]) < events.index(kernels[0])
    # The estimate: none before the first kernel ends, one from then on.
    first = events.index(kernels[0])
    assert all(e["eta"] is None for e in events[:first] if "eta" in e)
    assert all(e["eta"] is not None and e["eta"] >= 0 for e in events[first:] if "eta" in e)
    assert kernels[-1]["eta"] == 0

    # Lookups so far: the artifact and code missed, the kernels all missed.
    assert codegen[0]["cache"]["artifact"] == {"hits": 0, "misses": 1}
    assert codegen[0]["cache"]["kernel"] == {"hits": 0, "misses": n}
    hashed = [e["bytes_hashed"] for e in events if "bytes_hashed" in e]
    assert hashed == sorted(hashed) and hashed[-1] > 0
    # Elapsed only grows.
    elapsed = [e["elapsed"] for e in events]
    assert elapsed == sorted(elapsed)

    # The result line is the object --json prints.
    again = flowc.run("submit", model, "-o", tmp_path / "again.fca", "--json")
    plain = json.loads(again.stdout)
    assert set(events[-1]) - {"event", "elapsed"} == set(plain)
    assert events[-1]["artifact_digest"] == plain["artifact_digest"]


def test_a_hit_streams_a_cache_phase_and_its_result(flowc, tmp_path):
    model = cnn(tmp_path)
    flowc.submit(model, tmp_path / "cold.fca")
    result = flowc.run("submit", model, "-o", tmp_path / "hit.fca", "--progress=json")
    events = [json.loads(line) for line in result.stdout.splitlines()]
    schema = event_schema()
    for event in events:
        check_fields(event, schema[event["event"]], event["event"])
    assert events[-1]["event"] == "result" and events[-1]["cache"] == "hit"
    assert not [e for e in events if e["event"] == "kernel"]


def test_passes_are_events_of_an_in_process_compile(flowc, tmp_path):
    model = cnn(tmp_path)
    result = flowc.run("compile", model, "-o", tmp_path / "cnn.fca", "--progress")
    passes = re.findall(r"\] pass: (\S+) (\d+\.\d+) s$", result.stderr, re.M)
    names = [name for name, _ in passes]
    assert "canonicalize" in names and "llvm-codegen" in names, result.stderr
    kernels = re.findall(r"\] kernel: (\d+)/(\d+) ", result.stderr)
    assert kernels and [int(i) for i, _ in kernels] == list(range(1, len(kernels) + 1))


def run_on_pty(cmd):
    """Runs `cmd` with stderr on a pseudo-terminal; (exit status, stdout,
    the bytes the terminal got)."""
    leader, follower = pty.openpty()
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=follower)
    os.close(follower)
    seen = b""
    while True:
        ready, _, _ = select.select([leader], [], [], 300)
        if not ready:
            break
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not chunk:
            break
        seen += chunk
    out, _ = child.communicate(timeout=300)
    os.close(leader)
    return child.returncode, out.decode(), seen


def test_a_terminal_gets_one_line_redrawn_and_a_pipe_none(flowc, tmp_path):
    model = cnn(tmp_path)
    status, out, terminal = run_on_pty(flowc_cmd(flowc, "submit", model, "-o",
                                                 tmp_path / "tty.fca"))
    assert status == 0, terminal
    # Redrawn in place: carriage returns and clear-to-end-of-line, a bar
    # over the kernels, and one newline before the result line.
    assert terminal.count(b"\r") >= 3 and b"\x1b[K" in terminal
    assert re.search(rb"\[[#.]{20}\] \d+/\d+ codegen", terminal), terminal
    assert re.search(rb"ETA \d", terminal), terminal
    assert terminal.endswith(b"\n") and terminal.rstrip(b"\r\n").count(b"\n") == 0
    assert b"\x1b[3" not in terminal  # no colour
    assert "flowc: cache miss" in out

    # The same compile piped: nothing on stderr; with --progress, lines.
    flowc.run("cache", "clear")
    piped = flowc.run("submit", model, "-o", tmp_path / "piped.fca")
    assert piped.stderr == ""
    flowc.run("cache", "clear")
    text = flowc.run("submit", model, "-o", tmp_path / "text.fca", "--progress")
    assert "\r" not in text.stderr and "\x1b" not in text.stderr
    assert re.search(r"^flowc: \[\d+\.\d{3}s\] kernel: 1/\d+ ", text.stderr, re.M)
    assert re.search(r"^flowc: \[\d+\.\d{3}s\] kernels: \d+ loop nests", text.stderr, re.M)


def test_json_errors_name_the_file_node_and_op(flowc, tmp_path):
    bad = zero_strides_model(tmp_path / "bad.onnx")
    result = flowc.run("submit", bad, "-o", tmp_path / "bad.fca", "--json", check=False)
    assert result.returncode == BAD, result.stderr
    assert "flowc: error:" in result.stderr and "strides[0] = 0" in result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1, result.stdout
    error = json.loads(lines[0])["error"]
    check_error_object(error)
    assert error["exit_code"] == BAD
    assert (error["code"], error["kind"]) == ("InvalidArgument", "invalid_argument")
    assert (error["file"], error["node"], error["op"]) == (str(bad), "conv0", "Conv")
    assert "strides[0] = 0 is out of range" in error["message"]
    assert error["digest"] == ""

    # The same error ends an NDJSON stream: one error line, last.
    streamed = flowc.run("submit", bad, "-o", tmp_path / "bad.fca", "--progress=json",
                         check=False)
    assert streamed.returncode == BAD
    events = [json.loads(line) for line in streamed.stdout.splitlines()]
    schema = event_schema()
    for event in events:
        check_fields(event, schema[event["event"]], event["event"])
    assert [e["event"] for e in events].count("error") == 1
    assert events[-1]["event"] == "error" and "result" not in [e["event"] for e in events]
    assert events[-1]["error"] == error


def test_json_errors_of_a_missing_file_and_of_every_command(flowc, tmp_path):
    missing = tmp_path / "missing.onnx"
    for args in (["submit", missing, "--json"], ["inspect", missing, "--json"],
                 ["compile", missing, "--json"], ["submit", missing, "--progress=json"]):
        result = flowc.run(*args, check=False)
        assert result.returncode == BAD, (args, result.stderr)
        assert "no such file" in result.stderr
        line = json.loads(result.stdout.splitlines()[-1])
        error = line["error"]
        check_error_object(error)
        assert (error["code"], error["kind"]) == ("NotFound", "not_found"), args
        assert error["file"] == str(missing) and error["exit_code"] == BAD, args
        assert line.get("event", "error") == "error"
    # An artifact that is not one: the run command's --json too.
    junk = tmp_path / "junk.fca"
    junk.write_bytes(b"not an artifact")
    result = flowc.run("run", junk, "--json", check=False)
    assert result.returncode == BAD, result.stderr
    error = json.loads(result.stdout)["error"]
    check_error_object(error)
    assert error["file"] == str(junk), error
    # Without --json, stdout stays empty.
    plain = flowc.run("submit", missing, check=False)
    assert plain.returncode == BAD and plain.stdout == ""


def test_usage_errors_with_json_are_objects_too(flowc, tmp_path):
    model = cnn(tmp_path)
    result = flowc.run("submit", model, "-O", "9", "--json", check=False)
    assert result.returncode == USAGE, result.stderr
    error = json.loads(result.stdout)["error"]
    check_error_object(error)
    assert error["exit_code"] == USAGE and "opt-level" in error["message"]
    # --progress takes text or json, and names a wrong value.
    wrong = flowc.run("submit", model, "--progress=yaml", check=False)
    assert wrong.returncode == USAGE
    assert "yaml" in wrong.stderr and "--progress" in wrong.stderr


def test_hostile_names_give_valid_json(flowc, tmp_path):
    """A node name with quotes, parentheses and bytes that are not UTF-8:
    the error object is still one valid JSON line with the node named."""
    hostile = b"it's (\xff)"
    # A placeholder name of the same length, replaced in the bytes: no
    # length prefix changes.
    placeholder = "Q" * len(hostile)
    graph = helper.make_graph(
        [helper.make_node("LpNormalization", ["x"], ["y"], name=placeholder)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    data = model.SerializeToString()
    assert data.count(placeholder.encode()) == 1
    path = tmp_path / "hostile.onnx"
    path.write_bytes(data.replace(placeholder.encode(), hostile))
    result = subprocess.run(flowc_cmd(flowc, "submit", path, "--json"), capture_output=True)
    assert result.returncode == 4, result.stderr
    error = json.loads(result.stdout.decode("utf-8"))["error"]
    check_error_object(error)
    assert error["node"] == "it's (\ufffd)" and error["op"] == "LpNormalization"
