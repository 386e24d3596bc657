"""`flowc inspect`'s static profile and `flowc repro` weight-free reproducers:
exact FLOPs on the example CNN; a reproducer compiles, runs and is
deterministic; a 1 GB model's reproducer is a few kB; broken reproducers fail
with one clear line and leave the cache as it was."""
import json
import pathlib
import re
import shutil
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import make_models
from conftest import Flowc, save
from test_bad_input import cache_state


@pytest.fixture
def cnn(tmp_path):
    return save(make_models.make_cnn(np.random.default_rng(0)), tmp_path / "cnn.onnx")


def rows_by_op(profile):
    return {row["op"]: row for row in profile["ops"]}


# The example CNN (make_models.make_cnn), by hand:
#   conv1  [1,3,32,32] -> [1,8,32,32]  8192 outputs x 3*3*3 taps, + bias
#   conv2  [1,8,16,16] -> [1,16,8,8]   1024 outputs x 8*3*3 taps, + bias
#   pool1  2x2 windows over 2048 outputs; gap reads 1024, divides 16
#   fc     [1,16] x [16,10] + bias;    softmax 5 per output
CNN_FLOPS = {
    "Conv": 2 * 8192 * 27 + 8192 + 2 * 1024 * 72 + 1024,
    "Relu": 8192 + 1024,
    "MaxPool": 2048 * 4,
    "GlobalAveragePool": 1024 + 16,
    "Gemm": 2 * 10 * 16 + 10,
    "Softmax": 5 * 10,
    "Flatten": 0,
}


def test_inspect_profiles_the_example_cnn(flowc, cnn):
    info = json.loads(flowc.run("inspect", cnn, "--json").stdout)
    profile = info["profile"]
    rows = rows_by_op(profile)
    assert {op: row["flops"] for op, row in rows.items()} == CNN_FLOPS
    assert not any(row["estimated"] for row in profile["ops"])
    # Sorted by FLOPs, heaviest first.
    flops = [row["flops"] for row in profile["ops"]]
    assert flops == sorted(flops, reverse=True)
    assert profile["ops"][0]["op"] == "Conv"
    total = profile["total"]
    assert total["flops"] == sum(CNN_FLOPS.values())
    assert total["count"] == 9 and total["folded"] == 0
    assert total["parameters"] == info["parameters"] == 8 * 27 + 8 + 16 * 72 + 16 + 160 + 10
    assert rows["Conv"]["parameters"] == 8 * 27 + 8 + 16 * 72 + 16
    # Every node writes one float32 runtime tensor.
    assert rows["Conv"]["activation_bytes"] == (8192 + 1024) * 4
    assert total["activation_bytes"] == 4 * (8192 + 8192 + 2048 + 1024 + 1024 + 16 + 16
                                             + 10 + 10)

    # The human form: one aligned row per op type, then the totals.
    text = flowc.run("inspect", cnn).stdout
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("profile ("))
    end = next(i for i, line in enumerate(lines) if line.startswith("parameters: "))
    table = lines[start:end]
    assert table[1].split() == ["op", "nodes", "parameters", "FLOPs", "share", "activations"]
    assert table[2].split()[0] == "Conv" and "kFLOPs" in table[2]
    assert table[-1].split()[0] == "total"
    assert "618 kFLOPs" in table[-1] and "100.0%" in table[-1]
    assert len({line.index("FLOPs") for line in table[2:]}) == 1, text


def make_repro(flowc, model, out, *args):
    result = json.loads(flowc.run("repro", model, "-o", out, "--json", *args).stdout)
    assert sorted(p.name for p in out.iterdir()) == ["graph.mlirbc", "repro.json"]
    return result


def test_repro_of_the_cnn_compiles_runs_and_is_deterministic(flowc, cnn, tmp_path):
    repro = tmp_path / "cnn_repro"
    summary = make_repro(flowc, cnn, repro, "-O", "1")
    assert summary["weights"] == 6
    assert summary["bytes"] == sum(p.stat().st_size for p in repro.iterdir())
    manifest = json.loads((repro / "repro.json").read_text())
    assert manifest["format"] == "flowc.repro.v1"
    assert manifest["compile_options"] == {"target": "cpu", "opt_level": 1, "precision": "fp32"}
    assert manifest["toolchain"]["build_id"].startswith("flowc-")
    assert manifest["toolchain"]["llvm"] and manifest["toolchain"]["host_target"]
    assert manifest["source"]["model"] == str(cnn)
    assert [w["key"] for w in manifest["weights"]][0] == "conv1.weight"
    assert all(w["init"]["kind"] == "uniform" for w in manifest["weights"])

    # inspect reads the reproducer like the model: same shapes, same profile.
    original = json.loads(flowc.run("inspect", cnn, "--json").stdout)
    inspected = json.loads(flowc.run("inspect", repro, "--json").stdout)
    for key in ("inputs", "outputs", "ir_digest", "parameters", "op_counts", "profile"):
        assert inspected[key] == original[key], key
    # Generated weights are not the model's.
    assert inspected["model_digest"] != original["model_digest"]

    # Submit uses the recorded -O 1, compiles, and runs.
    first = flowc.submit(repro, tmp_path / "a.fca")
    assert first["cache"] == "miss"
    artifact = json.loads(flowc.run("inspect", tmp_path / "a.fca", "--json").stdout)
    assert artifact["options"] == "target=cpu;opt=1;precision=fp32"
    image = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    probs = flowc.execute(tmp_path / "a.fca", {"image": image})["probs"]
    assert probs.shape == (1, 10)
    assert np.all(np.isfinite(probs)) and abs(float(probs.sum()) - 1) < 1e-5

    # Again: the same weights, so the same model and artifact.
    second = flowc.submit(repro, tmp_path / "b.fca")
    assert second["cache"] == "hit"
    assert second["artifact_digest"] == first["artifact_digest"]

    # And in another cache: generated again, bit for bit.
    other = Flowc(tmp_path / "other")
    (tmp_path / "other").mkdir()
    other.run("daemon", "start")
    try:
        third = other.submit(repro, tmp_path / "c.fca")
        assert third["cache"] == "miss"
        assert third["model_digest"] == first["model_digest"]
        again = other.execute(tmp_path / "c.fca", {"image": image})["probs"]
        np.testing.assert_array_equal(again, probs)
    finally:
        other.run("daemon", "stop", check=False)


def big_matmul_model(directory: pathlib.Path, layers=4, width=8192):
    """x[1,width] through `layers` MatMuls with [width,width] float32 weights
    (256 MiB each) in one external data file, written sparse: instant."""
    nbytes = width * width * 4
    with open(directory / "weights.bin", "wb") as f:
        f.truncate(nbytes * layers)
    inits, nodes, previous = [], [], "x"
    for i in range(layers):
        tensor = TensorProto(name=f"w{i}", data_type=TensorProto.FLOAT, dims=[width, width],
                             data_location=TensorProto.EXTERNAL)
        for key, value in (("location", "weights.bin"), ("offset", str(i * nbytes)),
                           ("length", str(nbytes))):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
        inits.append(tensor)
        out = "y" if i == layers - 1 else f"h{i}"
        nodes.append(helper.make_node("MatMul", [previous, f"w{i}"], [out], name=f"mm{i}"))
        previous = out
    graph = helper.make_graph(
        nodes, "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path = directory / "big.onnx"
    onnx.save(model, path)
    return path, nbytes * layers


def test_repro_of_a_1gb_model_is_small_and_compiles(flowc, tmp_path):
    models = tmp_path / "big"
    models.mkdir()
    try:
        model, weight_bytes = big_matmul_model(models)
        assert weight_bytes == 1 << 30
        repro = tmp_path / "big_repro"
        summary = make_repro(flowc, model, repro)
        assert summary["parameter_bytes"] == weight_bytes
        size = sum(p.stat().st_size for p in repro.iterdir())
        assert size < 5 * 1000 * 1000, size
        print(f"\n1 GiB model -> reproducer of {size} bytes")
    finally:
        shutil.rmtree(models)

    started = time.monotonic()
    result = flowc.submit(repro, tmp_path / "big.fca")
    print(f"submit of the reproducer: {time.monotonic() - started:.1f} s")
    log = (flowc.cache_dir / "flowcd.log").read_text()
    generated = re.findall(r"reproducer .*: generated 4 weights \((\d+) bytes\) in ([\d.]+) s",
                           log)
    assert generated and int(generated[-1][0]) == weight_bytes
    print(f"weights generated on load in {generated[-1][1]} s")
    try:
        assert result["cache"] == "miss"
        x = np.ones((1, 8192), dtype=np.float32)
        y = flowc.execute(tmp_path / "big.fca", {"x": x})["y"]
        assert y.shape == (1, 8192) and np.all(np.isfinite(y))
    finally:
        # 2 GiB of weights and artifact: not for pytest to keep around.
        (tmp_path / "big.fca").unlink(missing_ok=True)
        flowc.run("cache", "clear", check=False)


def break_repro(repro: pathlib.Path, case: str):
    manifest_path, graph_path = repro / "repro.json", repro / "graph.mlirbc"
    if case == "missing_graph":
        graph_path.unlink()
    elif case == "missing_manifest":
        manifest_path.unlink()
    elif case == "malformed_json":
        manifest_path.write_text(manifest_path.read_text()[:100])
    elif case == "garbage_bytecode":
        graph_path.write_bytes(b"ML\xefR garbage, not bytecode" * 10)
    elif case == "shape_mismatch":
        manifest = json.loads(manifest_path.read_text())
        manifest["weights"][0]["shape"] = [8, 3, 5, 5]
        manifest_path.write_text(json.dumps(manifest))
    elif case == "wrong_format":
        manifest = json.loads(manifest_path.read_text())
        manifest["format"] = "something.else"
        manifest_path.write_text(json.dumps(manifest))
    elif case == "number_overflow":
        # A number past double's range (nlohmann's out_of_range, not a
        # parse_error): found by fuzz_repro.
        text = manifest_path.read_text()
        manifest_path.write_text(re.sub(r'"seed": ?', '"seed": 1e999', text, count=1))
    elif case == "bad_init":
        manifest = json.loads(manifest_path.read_text())
        manifest["weights"][2]["init"] = {"kind": "uniform", "seed": 1, "low": 1, "high": 0}
        manifest_path.write_text(json.dumps(manifest))


BROKEN = {
    "missing_graph": "graph.mlirbc: missing",
    "missing_manifest": "not a flowc reproducer: no repro.json",
    "malformed_json": "repro.json: not valid JSON",
    "number_overflow": "repro.json: not valid JSON: number overflow",
    "garbage_bytecode": "graph.mlirbc: graph IR bytecode does not parse",
    "shape_mismatch": "repro.json: field 'weights[0]' ('conv1.weight'): shape [8,3,5,5] "
                      "does not match graph.mlirbc ([8,3,3,3])",
    "wrong_format": "repro.json: field 'format' is 'something.else'",
    "bad_init": "repro.json: field 'weights[2].init' needs low < high, has low 1 and high 0",
}


@pytest.fixture(scope="module")
def pristine_repro(tmp_path_factory):
    """One reproducer of the CNN, copied by every broken-reproducer case."""
    tmp = tmp_path_factory.mktemp("pristine")
    client = Flowc(tmp)
    client.run("daemon", "start")
    try:
        model = save(make_models.make_cnn(np.random.default_rng(0)), tmp / "cnn.onnx")
        make_repro(client, model, tmp / "repro")
    finally:
        client.run("daemon", "stop", check=False)
    return tmp / "repro"


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_reproducer_fails_cleanly(flowc, pristine_repro, tmp_path, case):
    good = tmp_path / "good"
    shutil.copytree(pristine_repro, good)
    assert flowc.submit(good)["cache"] == "miss"
    before = cache_state(flowc.cache_dir)
    broken = tmp_path / "broken"
    shutil.copytree(pristine_repro, broken)
    break_repro(broken, case)
    for command in ("submit", "inspect"):
        result = flowc.run(command, broken, *(["-o", tmp_path / "out.fca"]
                                              if command == "submit" else []), check=False)
        assert result.returncode != 0
        assert result.stderr.startswith("flowc: error: ")
        assert result.stderr.count("\n") == 1, result.stderr
        assert BROKEN[case] in result.stderr, result.stderr
        assert str(broken) in result.stderr
    assert not (tmp_path / "out.fca").exists()
    assert cache_state(flowc.cache_dir) == before
    # The daemon and the cache keep serving.
    assert flowc.submit(good)["cache"] == "hit"
