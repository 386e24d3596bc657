"""No damaged artifact runs (issue 13): `flowc run` and `flowc inspect` check
every section of an artifact from a real `flowc submit` against its digest,
and the header, table and plan against their bounds even with --no-verify.
A damaged artifact exits 3 naming the file and the section; no damage ever
crashes the runtime or runs to different outputs."""
import json
import random
import struct

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from conftest import onnxruntime_outputs, save

SECTIONS = {1: "metadata", 2: "graph IR", 3: "code", 4: "plan", 5: "weights"}
HEADER_BYTES, ENTRY_BYTES = 64, 56


def conv_model(path):
    """Conv -> Relu -> Flatten -> MatMul with a 128 KiB weight (a file in the
    cache, so --thin refers to it by digest)."""
    rng = np.random.default_rng(13)
    conv_w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    fc_w = rng.standard_normal((256, 128)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "conv_w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("Flatten", ["r"], ["f"]),
         helper.make_node("MatMul", ["f", "fc_w"], ["y"])],
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 128])],
        [numpy_helper.from_array(conv_w, "conv_w"), numpy_helper.from_array(fc_w, "fc_w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return save(model, path)


def sections(data):
    """[(kind, offset, size, entry offset)] from the artifact's table."""
    count, table = struct.unpack_from("<IQ", data, 12)
    out = []
    for i in range(count):
        entry = table + i * ENTRY_BYTES
        kind, _, offset, size = struct.unpack_from("<IIQQ", data, entry)
        out.append((kind, offset, size, entry))
    return out


class Runner:
    def __init__(self, flowc, tmp_path):
        self.flowc, self.tmp = flowc, tmp_path
        self.model = conv_model(tmp_path / "conv.onnx")
        self.x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
        np.save(tmp_path / "x.npy", self.x)
        flowc.submit(self.model, tmp_path / "good.fca")
        self.pristine = (tmp_path / "good.fca").read_bytes()
        result, self.reference = self.run(tmp_path / "good.fca")
        assert result.returncode == 0, result.stderr
        expected = onnxruntime_outputs(self.model, {"x": self.x})["y"]
        np.testing.assert_allclose(self.reference, expected.ravel(), rtol=1e-4, atol=1e-4)

    def run(self, artifact, *options):
        """`flowc run ARTIFACT` on x; returns (result, y or None)."""
        result = self.flowc.run("run", artifact, "--input", self.tmp / "x.npy", "--json",
                                "--print", "1000", *options, check=False)
        if result.returncode != 0:
            return result, None
        report = json.loads(result.stdout)
        return result, np.array(report["outputs"][0]["values"], dtype=np.float32)

    def damaged(self, data, name="damaged.fca"):
        path = self.tmp / name
        path.write_bytes(bytes(data))
        return path

    def flipped(self, at, mask=0x5A):
        data = bytearray(self.pristine)
        data[at] ^= mask
        return data


def assert_refused(result, *words):
    """Exit 3, one error line naming the file and `words`; never a signal."""
    assert result.returncode == 3, (result.returncode, result.stderr)
    assert result.stderr.startswith("flowc: error: "), result.stderr
    assert "damaged.fca" in result.stderr, result.stderr
    for word in words:
        assert word in result.stderr, result.stderr


def test_a_flipped_byte_in_each_section_exits_3_naming_it(flowc, tmp_path):
    runner = Runner(flowc, tmp_path)
    found = set()
    for kind, offset, size, _ in sections(runner.pristine):
        found.add(SECTIONS[kind])
        path = runner.damaged(runner.flipped(offset + size // 2))
        result, _ = runner.run(path)
        assert_refused(result, f"{SECTIONS[kind]} section is damaged: sha256 ",
                       "does not match the artifact's table")
        # inspect opens it the same way.
        assert_refused(flowc.run("inspect", path, check=False),
                       f"{SECTIONS[kind]} section is damaged")
    assert found == set(SECTIONS.values())


def test_damaged_header_table_and_length_exit_3(flowc, tmp_path):
    runner = Runner(flowc, tmp_path)
    table_entry = sections(runner.pristine)[2][3]
    cases = [
        (runner.flipped(40), "header or section table is damaged"),
        (runner.flipped(table_entry + 8), "header or section table is damaged"),
        (runner.pristine[:-1], "is truncated"),
        (runner.pristine[: len(runner.pristine) // 2], "is truncated"),
        (runner.pristine + b"\0" * 4096, "is extended"),
    ]
    for data, message in cases:
        result, _ = runner.run(runner.damaged(data))
        assert_refused(result, message)
    # An artifact of format version 1 carries no digests: rebuild it.
    old = bytearray(runner.pristine)
    struct.pack_into("<I", old, 8, 1)
    result, _ = runner.run(runner.damaged(old))
    assert_refused(result, "format version 1", "rebuild it")


def test_no_verify_still_checks_bounds(flowc, tmp_path):
    runner = Runner(flowc, tmp_path)
    # Unverified, the pristine artifact runs to the same outputs.
    result, y = runner.run(tmp_path / "good.fca", "--no-verify")
    assert result.returncode == 0, result.stderr
    np.testing.assert_array_equal(y, runner.reference)
    count, table = struct.unpack_from("<IQ", runner.pristine, 12)
    cases = []
    for kind, offset, size, entry in sections(runner.pristine):
        moved = bytearray(runner.pristine)
        struct.pack_into("<Q", moved, entry + 8, offset + (1 << 40))
        cases.append((moved, "lies outside the sections"))
        grown = bytearray(runner.pristine)
        struct.pack_into("<Q", grown, entry + 16, size + (1 << 20))
        cases.append((grown, "lies outside the sections"))
        shifted = bytearray(runner.pristine)
        struct.pack_into("<Q", shifted, entry + 8, offset + 64)
        cases.append((shifted, "section"))
        retyped = bytearray(runner.pristine)
        struct.pack_into("<I", retyped, entry, 9)
        cases.append((retyped, "unknown kind 9"))
    many = bytearray(runner.pristine)
    struct.pack_into("<I", many, 12, 1 << 31)
    cases.append((many, "2147483648 sections"))
    off_end = bytearray(runner.pristine)
    struct.pack_into("<Q", off_end, 16, table - 8)
    cases.append((off_end, "does not end the file"))
    for data, message in cases:
        result, _ = runner.run(runner.damaged(data), "--no-verify")
        assert_refused(result, message)


def test_a_damaged_weight_of_a_thin_artifact_in_the_cache_exits_3(flowc, tmp_path):
    runner = Runner(flowc, tmp_path)
    flowc.submit(runner.model, tmp_path / "thin.fca", "--thin")
    data = (tmp_path / "thin.fca").read_bytes()
    kind, offset, size, _ = [s for s in sections(data) if s[0] == 4][0]
    plan = json.loads(data[offset:offset + size])
    external = [w for w in plan["weights"] + plan["packed"] if w.get("external")]
    assert external, plan
    digest = external[0]["digest"]
    hexdigest = digest[len("sha256:"):].split("/")[0]
    blob = flowc.cache_dir / "cas" / hexdigest[:2] / hexdigest[2:]
    result, y = runner.run(tmp_path / "thin.fca")
    assert result.returncode == 0, result.stderr
    np.testing.assert_array_equal(y, runner.reference)
    # Bit rot in the cache's copy (same size): refused, naming weight and file.
    blob.chmod(0o600)
    content = bytearray(blob.read_bytes())
    content[len(content) // 2] ^= 1
    blob.write_bytes(bytes(content))
    result, _ = runner.run(tmp_path / "thin.fca")
    assert result.returncode == 3, result.stderr
    assert "thin.fca" in result.stderr and "is damaged: sha256 " in result.stderr
    assert str(blob) in result.stderr and "does not match the plan's digest" in result.stderr


def test_random_damage_never_crashes_or_runs_wrongly(flowc, tmp_path):
    runner = Runner(flowc, tmp_path)
    rng = random.Random(1313)
    size = len(runner.pristine)
    refused = 0
    for i in range(200):
        data = bytearray(runner.pristine)
        at = rng.randrange(size)
        action = rng.choice(["flip", "flip", "truncate", "insert"])
        if action == "flip":
            data[at] ^= rng.randrange(1, 256)
        elif action == "truncate":
            del data[at:]
        else:
            data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
        result, y = runner.run(runner.damaged(data))
        assert result.returncode >= 0, f"signal {-result.returncode} ({action} at {at})"
        if result.returncode == 0:
            np.testing.assert_array_equal(y, runner.reference, err_msg=f"{action} at {at}")
            continue
        assert result.returncode == 3, (action, at, result.stderr)
        refused += 1
    # Every byte is covered by a digest, the zero-padding rule or the length.
    assert refused == 200


def test_random_structural_damage_without_digests_never_crashes(flowc, tmp_path):
    runner = Runner(flowc, tmp_path)
    rng = random.Random(31)
    count, table = struct.unpack_from("<IQ", runner.pristine, 12)
    # The bytes that say where everything is: header fields and table entries.
    structural = list(range(8, 32)) + [table + i * ENTRY_BYTES + k
                                       for i in range(count) for k in range(24)]
    for i in range(100):
        data = bytearray(runner.pristine)
        at = rng.choice(structural)
        data[at] ^= rng.randrange(1, 256)
        result, y = runner.run(runner.damaged(data), "--no-verify")
        assert result.returncode >= 0, f"signal {-result.returncode} (flip at {at})"
        assert result.returncode in (0, 3), (at, result.stderr)
        if result.returncode == 0:
            np.testing.assert_array_equal(y, runner.reference, err_msg=f"flip at {at}")
