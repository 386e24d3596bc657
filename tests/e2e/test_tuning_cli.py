"""`flowc tuning ls|export|import|clear [--json]` on a cache directory, no
daemon: records read from a file, listed, exported, imported into another
cache, cleared; and the inputs it must refuse, each with its exit code and
message."""
import json
import os
import time

import pytest

from conftest import Flowc

EXIT_BAD_INPUT = 3
EXIT_USAGE = 2


def record(candidate, time_ns, device="xeon-8480 avx512f 16c", measured_ms=None, **fields):
    value = {"signature": "conv2d:n1c64h56w56k64r3s3", "device": device,
             "versions": "onednn 3.6 omp", "candidate": candidate, "time_ns": time_ns,
             "spread_ns": time_ns // 40, "samples": 21, "separated": True, "noise": 0.02,
             "measured_ms": measured_ms or int(time.time() * 1000) - 90_000,
             "host": "ci-runner-7"}
    value.update(fields)
    return value


def document(*records, fmt="flowc.tuning.v1"):
    return json.dumps({"format": fmt, "records": list(records)})


def tuning(flowc, *args, check=True):
    return flowc.run("tuning", *args, check=check)


def ls_json(flowc, *args):
    return json.loads(tuning(flowc, "ls", "--json", *args).stdout)


@pytest.fixture
def cli(tmp_path):
    return Flowc(tmp_path)


def test_ls_of_an_empty_cache(cli):
    result = tuning(cli, "ls")
    assert result.stdout.strip() == f"flowc: no tuning records in {cli.cache_dir}"
    assert ls_json(cli) == []


def test_import_counts_and_warns_then_ls_shows_the_record(cli, tmp_path):
    source = tmp_path / "records.json"
    source.write_text(document(record("nchw16c", 41_500),
                               record("nhwc", -3)))
    result = tuning(cli, "import", source)
    assert "imported 1 tuning records" in result.stdout
    assert "ignored 1 not valid" in result.stdout
    assert ("flowc: warning: tuning import: record 1 is ignored: tuning record: "
            "time_ns is -3, not positive") in result.stderr
    # The record, every field as imported.
    listed = ls_json(cli)
    assert listed == [json.loads(source.read_text())["records"][0]]
    text = tuning(cli, "ls").stdout.splitlines()
    assert text[0].split() == ["SIGNATURE", "CANDIDATE", "TIME", "SAMPLES", "HOST", "AGE",
                               "DEVICE"]
    assert len(text) == 2
    assert text[1].split()[:9] == ["conv2d:n1c64h56w56k64r3s3", "nchw16c", "41.5", "us",
                                   "+-", "1.04", "us", "21", "ci-runner-7"]
    assert text[1].split()[9] in ("90s", "91s", "92s", "93s")
    assert text[1].endswith("xeon-8480 avx512f 16c")
    # --json of import: the counts.
    again = json.loads(tuning(cli, "import", source, "--json").stdout)
    assert again == {"file": str(source), "imported": 0, "ignored": 1, "stale": 1}


def test_export_then_import_into_another_cache_lists_the_same(cli, tmp_path):
    source = tmp_path / "records.json"
    source.write_text(document(record("nchw16c", 41_500), record("nhwc", 52_000),
                               record("tile8x4", 900, device="epyc-9654 avx2 32c",
                                      signature="loop:sha256:" + "ab" * 32)))
    tuning(cli, "import", source)
    exported = tmp_path / "out" / "export.json"
    exported.parent.mkdir()
    result = tuning(cli, "export", "-o", exported)
    assert result.stdout.strip() == f"flowc: exported 3 tuning records to {exported}"
    # Written atomically: no temp file is left beside it.
    assert os.listdir(exported.parent) == ["export.json"]
    other = Flowc(tmp_path / "other")
    counts = json.loads(tuning(other, "import", exported, "--json").stdout)
    assert counts == {"file": str(exported), "imported": 3, "ignored": 0, "stale": 0}
    assert ls_json(other) == ls_json(cli)
    # stdout without -o is the same document.
    assert tuning(cli, "export").stdout == exported.read_text()
    # --device: that device's records only.
    epyc = ls_json(other, "--device", "epyc-9654 avx2 32c")
    assert [r["candidate"] for r in epyc] == ["tile8x4"]
    only = json.loads(tuning(cli, "export", "--device", "epyc-9654 avx2 32c").stdout)
    assert [r["candidate"] for r in only["records"]] == ["tile8x4"]
    # A long signature is shortened in the text listing, head and tail kept.
    lines = tuning(other, "ls").stdout.splitlines()
    loop = next(line for line in lines if "tile8x4" in line)
    signature = "loop:sha256:" + "ab" * 32
    assert loop.split()[0] == signature[:29] + "..." + signature[-10:]


def test_clear_one_device_then_all(cli, tmp_path):
    source = tmp_path / "records.json"
    source.write_text(document(record("nchw16c", 41_500), record("nhwc", 52_000),
                               record("gemm", 900, device="epyc-9654 avx2 32c")))
    tuning(cli, "import", source)
    result = tuning(cli, "clear", "--device", "epyc-9654 avx2 32c")
    assert result.stdout.strip() == \
        "flowc: removed 1 tuning records for device 'epyc-9654 avx2 32c'"
    assert [r["candidate"] for r in ls_json(cli)] == ["nchw16c", "nhwc"]
    assert json.loads(tuning(cli, "clear", "--json").stdout) == {"removed": 2}
    assert ls_json(cli) == []


@pytest.mark.parametrize("case", ["missing", "directory", "fifo", "garbage", "format",
                                  "no-records"])
def test_import_refuses_what_is_not_an_export(cli, tmp_path, case):
    path = tmp_path / "input.json"
    if case == "directory":
        path.mkdir()
    elif case == "fifo":
        os.mkfifo(path)
    elif case == "garbage":
        path.write_bytes(b"\x89PNG\r\n\x1a\n not a tuning export")
    elif case == "format":
        path.write_text(document(record("nhwc", 100), fmt="flowc.bundle.v1"))
    elif case == "no-records":
        path.write_text(json.dumps({"format": "flowc.tuning.v1"}))
    expected = {
        "missing": "cannot open '{p}': No such file or directory",
        "directory": "'{p}' is not a regular file",
        "fifo": "'{p}' is not a regular file",
        "garbage": "not a tuning export: not JSON (at byte 1)",
        "format": "not a tuning export: format is 'flowc.bundle.v1', expected "
                  "'flowc.tuning.v1'",
        "no-records": "not a tuning export: \"records\" is missing or not a list",
    }[case].format(p=path)
    result = tuning(cli, "import", path, check=False)
    assert result.returncode == EXIT_BAD_INPUT, result.stderr
    assert result.stderr.strip() == \
        f"flowc: error: cannot import tuning records from '{path}': {expected}"
    assert ls_json(cli) == []
    # --json: the error as an object on stdout too.
    result = tuning(cli, "import", path, "--json", check=False)
    assert result.returncode == EXIT_BAD_INPUT
    assert json.loads(result.stdout)["error"]["message"].endswith(expected)


def test_export_to_a_directory_that_does_not_exist(cli, tmp_path):
    target = tmp_path / "nowhere" / "export.json"
    result = tuning(cli, "export", "-o", target, check=False)
    assert result.returncode == EXIT_BAD_INPUT, result.stderr
    assert result.stderr.startswith(f"flowc: error: cannot write -o '{target}'")
    assert "No such file or directory" in result.stderr


def test_usage_errors(cli):
    result = tuning(cli, check=False)
    assert result.returncode == EXIT_USAGE
    assert result.stderr == "flowc: error: A subcommand is required (see flowc --help)\n"
    result = tuning(cli, "import", check=False)
    assert result.returncode == EXIT_USAGE
    assert result.stderr == "flowc: error: file is required (see flowc --help)\n"
