"""`%load_ext flowc` and `%flowc_watch` in a real IPython shell: the
variable is bound to the compiled model, rebound after a save, kept through
a broken save; `%flowc_unwatch` stops it."""
import os
import sys
import time

import numpy as np
import onnx
import pytest

from client_fixtures import (ROOT, assert_close, client, flowc_package,  # noqa: F401
                             onnxruntime_outputs, save)

sys.path.insert(0, str(ROOT / "examples"))
import make_models  # noqa: E402


def wait_until(predicate, seconds=120):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def shell(client):
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "flowc")
    yield shell
    shell.run_line_magic("flowc_unwatch", "")
    shell.run_line_magic("unload_ext", "flowc")
    InteractiveShell.clear_instance()


def write_atomically(model, path):
    """As editors save: a temp file beside it, then rename."""
    tmp = path.with_name(path.name + ".tmp")
    onnx.save(model, str(tmp))
    os.replace(tmp, path)


def test_flowc_watch_rebinds_the_variable_on_save(shell, tmp_path):
    import flowc

    path = save(make_models.make_cnn(np.random.default_rng(0)), tmp_path / "net.onnx")
    watch = shell.run_line_magic("flowc_watch", f"{path} model")
    assert wait_until(lambda: "model" in shell.user_ns), "the first compile never bound `model`"
    first = shell.user_ns["model"]
    assert isinstance(first, flowc.Artifact)

    # A new version of the model: the variable is rebound to its artifact,
    # which runs as onnxruntime runs the new file.
    new = make_models.make_cnn(np.random.default_rng(1))
    write_atomically(new, path)
    assert wait_until(lambda: shell.user_ns["model"].digest != first.digest), \
        "the save was never compiled"
    x = np.random.default_rng(2).standard_normal((1, 3, 32, 32)).astype(np.float32)
    expected = onnxruntime_outputs(path, {"image": x})
    for name, value in shell.user_ns["model"].run(image=x).items():
        assert_close(value, expected[name])
    second = shell.user_ns["model"]

    # A broken save is reported and the last good artifact stays bound.
    path.write_bytes(b"\x08\x07 not onnx")
    assert wait_until(lambda: watch.errors == 1), "the broken save was not compiled"
    assert isinstance(watch.last_error, flowc.InvalidModel)
    assert shell.user_ns["model"] is second

    # Unwatched: a save changes nothing.
    shell.run_line_magic("flowc_unwatch", "model")
    compiles = watch.compiles
    write_atomically(make_models.make_cnn(np.random.default_rng(3)), path)
    time.sleep(0.5)
    assert watch.compiles == compiles and shell.user_ns["model"] is second


def test_flowc_watch_names_the_variable_after_the_model(shell, tmp_path):
    path = save(make_models.make_cnn(np.random.default_rng(0)), tmp_path / "tiny_cnn.onnx")
    shell.run_line_magic("flowc_watch", str(path))
    assert wait_until(lambda: "tiny_cnn" in shell.user_ns)


def test_flowc_watch_refuses_bad_arguments(shell, tmp_path):
    import flowc

    with pytest.raises(flowc.NotFound, match="cannot read model 'nowhere.onnx'"):
        shell.run_line_magic("flowc_watch", "nowhere.onnx")
    path = save(make_models.make_cnn(np.random.default_rng(0)), tmp_path / "m.onnx")
    with pytest.raises(flowc.InvalidModel, match="unknown option --fast"):
        shell.run_line_magic("flowc_watch", f"{path} --fast")
    with pytest.raises(flowc.InvalidModel, match="'not-a-name' is not a Python name"):
        shell.run_line_magic("flowc_watch", f"{path} not-a-name")
    with pytest.raises(flowc.NotFound, match="nothing is watched as 'ghost'"):
        shell.run_line_magic("flowc_unwatch", "ghost")
