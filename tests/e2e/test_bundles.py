"""`flowc cache export` / `flowc cache import`: a compiled model's entries
move between caches as a tar, verified and all at once."""
import json
import pathlib
import tarfile

from conftest import Flowc
from test_tasks import daemon, elementwise_chain  # noqa: F401 (a fixture)


def test_a_bundle_gives_another_cache_a_hit_with_no_kernel_compiled(daemon, tmp_path):
    model = elementwise_chain(tmp_path / "chain.onnx", blocks=4)
    first = daemon(name="first")
    compiled = first.flowc.submit(model, tmp_path / "a.fca", "-O", "1")
    bundle = tmp_path / "chain.tar"
    exported = json.loads(first.flowc.run("cache", "export", model, "-O", "1", "-o", bundle,
                                          "--json").stdout)
    assert exported["entries"] == 3 and exported["blobs"] >= 4, exported
    # A plain tar: any tool lists it.
    names = tarfile.open(bundle).getnames()
    assert names[0] == "flowc-bundle.json" and all(n.startswith("blobs/") for n in names[1:])

    second = daemon(name="second")
    imported = json.loads(second.flowc.run("cache", "import", bundle, "--json").stdout)
    assert imported["entries"] == 3 and imported["blobs"] == exported["blobs"], imported
    hit = second.flowc.submit(model, tmp_path / "b.fca", "-O", "1")
    assert hit["cache"] == "hit" and hit["kernels_compiled"] == 0, hit
    assert hit["artifact_digest"] == compiled["artifact_digest"]

    # Importing again writes nothing new.
    again = json.loads(second.flowc.run("cache", "import", bundle, "--json").stdout)
    assert again["blobs"] == 0 and again["blobs_present"] == exported["blobs"], again


def test_a_model_not_compiled_with_those_options_is_refused(daemon, tmp_path):
    model = elementwise_chain(tmp_path / "chain.onnx", blocks=2)
    d = daemon()
    d.flowc.submit(model, tmp_path / "a.fca")
    result = d.flowc.run("cache", "export", model, "-O", "3", "-o", tmp_path / "b.tar",
                         check=False)
    assert result.returncode == 3, result.stderr
    assert "is not compiled with these options" in result.stderr
    assert not (tmp_path / "b.tar").exists()


def test_a_damaged_bundle_changes_nothing(daemon, tmp_path):
    model = elementwise_chain(tmp_path / "chain.onnx", blocks=2)
    first = daemon(name="first")
    first_artifact = first.flowc.submit(model, tmp_path / "a.fca")["artifact_digest"]
    bundle = tmp_path / "good.tar"
    first.flowc.run("cache", "export", model, "-o", bundle)
    good = bundle.read_bytes()
    second = daemon(name="second")
    before = json.loads(second.flowc.run("cache", "stats", "--json").stdout)
    flipped = bytearray(good)
    artifact = good.index(b"blobs/" + first_artifact.split(":")[1].split("/")[0].encode())
    flipped[artifact + 512 + 100] ^= 0x20
    cases = {"truncated": (good[:len(good) // 2], "truncated"),
             "flipped": (bytes(flipped), "hashes to"),
             "not a tar": (b"x" * 4096, "not a ustar header"),
             "missing": (None, "")}
    for name, (data, message) in cases.items():
        path = tmp_path / f"{name}.tar"
        if data is not None:
            path.write_bytes(data)
        result = second.flowc.run("cache", "import", path, check=False)
        assert result.returncode == 3, (name, result.stderr)
        assert message in result.stderr, (name, result.stderr)
    after = json.loads(second.flowc.run("cache", "stats", "--json").stdout)
    assert after["actions"] == before["actions"], after
    miss = second.flowc.submit(model, tmp_path / "b.fca")
    assert miss["cache"] == "miss"
