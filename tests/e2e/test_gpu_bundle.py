"""scripts/gpu-bundle.sh: the GPU check's binaries packed here in parts
that a size-limited copy takes one at a time, then unpacked in another tree
and run there on the libraries the bundle brought (docs/cuda.md, Checks)."""
import os
import pathlib
import re
import shutil
import subprocess
import tarfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu-bundle.sh"
# What the bundle leaves to the GPU machine: glibc, the C++ runtime, the
# driver (the script's own list).
SYSTEM = re.compile(r"^(ld-linux[-a-z0-9_]*|libc|libm|libdl|librt|libpthread|libresolv|"
                    r"libutil|libstdc\+\+|libgcc_s|libcuda|libnvidia-[-a-z0-9_]*)\.so")


def bundle(*args, cwd=None):
    return subprocess.run(["bash", str(SCRIPT), *map(str, args)], capture_output=True,
                          text=True, timeout=900, cwd=cwd)


def test_the_bundle_unpacks_in_another_tree_and_runs_on_its_own_libraries(tmp_path):
    parts = tmp_path / "parts"
    packed = bundle("--out", parts, "--part-mib", 16, "--level", 0)
    assert packed.returncode == 0, packed.stderr
    tars = sorted(parts.glob("part-*.tar"))
    assert len(tars) >= 2, packed.stdout
    for part in tars:
        with tarfile.open(part) as tar:
            members = tar.getmembers()
        # At most the limit, tar's own bytes included, but for a file
        # larger than a part alone.
        assert len(members) == 1 or part.stat().st_size <= 16 << 20, part

    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "scripts").mkdir(parents=True)
    shutil.copy(SCRIPT, elsewhere / "scripts")
    unpacked = subprocess.run(["bash", "scripts/gpu-bundle.sh", "--unpack", "--out", parts],
                              capture_output=True, text=True, timeout=300, cwd=elsewhere)
    assert unpacked.returncode == 0, unpacked.stderr
    assert "GPU_CHECK_PREBUILT=1" in unpacked.stdout
    assert not list(parts.glob("part-*.tar"))
    libs = elsewhere / "build" / "gpu-libs"
    env = {"PATH": os.environ["PATH"], "LD_LIBRARY_PATH": str(libs)}
    files = [*(elsewhere / "build" / "bin").iterdir(), *(elsewhere / "build" / "lib").iterdir()]
    assert {f.name for f in files} >= {"flowc", "flowcd", "flowc-worker", "runtime_gpu_test"}
    for file in files:
        ldd = subprocess.run(["ldd", str(file)], env=env, capture_output=True, text=True,
                             check=True).stdout
        assert "not found" not in ldd, (file.name, ldd)
        for name, path in re.findall(r"^\s*(\S+) => (\S+)", ldd, re.MULTILINE):
            assert path.startswith(str(libs)) or SYSTEM.match(name), (file.name, name, path)
    version = subprocess.run([str(elsewhere / "build" / "bin" / "flowc"), "--version"],
                             env=env, capture_output=True, text=True, timeout=60)
    assert version.returncode == 0, version.stderr
    assert version.stdout.startswith("flowc ") and "CUDA: cuDNN" in version.stdout


def test_bad_arguments_and_foreign_directories_are_refused(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("mine")
    for args, message in (
            (["--unpack", "--out", empty], "no "),
            (["--part-mib", "0"], "--part-mib takes a whole number"),
            (["--part-mib", "x"], "--part-mib takes a whole number"),
            (["--level", "10"], "--level takes an xz preset 0 to 9"),
            (["--frobnicate"], "unknown argument '--frobnicate'"),
            (["--out", foreign, "--level", "0"], "not a bundle this script made")):
        run = bundle(*args)
        assert run.returncode == 2 and message in run.stderr, (args, run.stderr)
    assert (foreign / "keep.txt").read_text() == "mine"
