"""Einsum: matrix products, attention, bilinear forms, ellipses that
broadcast, implicit outputs, sums and transposes, three operands, compared
with onnxruntime; and the refusals."""
import numpy as np
import pytest
from onnx import TensorProto, helper

from conftest import assert_close, onnxruntime_outputs, save

UNSUPPORTED, BAD = 4, 3
RNG = np.random.default_rng(12)

# equation -> the operands' shapes.
CASES = {
    "ij,jk->ik": [[3, 4], [4, 5]],
    "bij,bjk->bik": [[2, 3, 4], [2, 4, 5]],
    "bhid,bhjd->bhij": [[2, 3, 5, 8], [2, 3, 6, 8]],
    "bhij,bhjd->bhid": [[2, 3, 5, 6], [2, 3, 6, 8]],
    "...ij,...jk->...ik": [[2, 1, 3, 4], [1, 3, 4, 5]],
    "b i d, d j -> b j i": [[2, 3, 4], [4, 5]],
    "ij,jk": [[3, 4], [4, 5]],
    "ji,jk": [[4, 3], [4, 5]],
    "ij->ji": [[3, 4]],
    "ijk->ki": [[3, 4, 5]],
    "ij->": [[3, 4]],
    "i,j->ij": [[3], [4]],
    "i,i->": [[6], [6]],
    "bn,anm,bm->ba": [[2, 3], [4, 3, 5], [2, 5]],
    "ijk,jl->il": [[2, 3, 4], [3, 5]],
    "ij,kl->ijkl": [[2, 3], [1, 4]],
    "...d,...d->...": [[2, 3, 4], [1, 3, 4]],
    "Bij,Bjk->Bki": [[2, 3, 4], [2, 4, 5]],
}
# onnxruntime fails on these ("Destination size does not match source" in
# its CopyCpuTensor): compared with NumPy's einsum alone.
ONNXRUNTIME_FAILS = {"ijk->ki"}


def einsum_model(equation, shapes, output_shape=None, opset=12):
    names = [f"x{i}" for i in range(len(shapes))]
    graph = helper.make_graph(
        [helper.make_node("Einsum", names, ["y"], name="n", equation=equation)], "e",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in zip(names, shapes)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, output_shape)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=8)


@pytest.mark.parametrize("equation", sorted(CASES))
def test_einsum_matches_onnxruntime(flowc, tmp_path, equation):
    shapes = CASES[equation]
    feeds = {f"x{i}": RNG.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)}
    expected = np.einsum(equation.replace(" ", ""), *feeds.values())
    path = save(einsum_model(equation, shapes, list(expected.shape)), tmp_path / "einsum.onnx")
    flowc.submit(path)
    ours = flowc.execute(path.with_suffix(".fca"), feeds)["y"]
    assert_close(ours, expected.astype(np.float32))
    if equation not in ONNXRUNTIME_FAILS:
        assert_close(ours, onnxruntime_outputs(path, feeds)["y"])


REFUSED = {
    "diagonal": ("ii->i", [[3, 3]], UNSUPPORTED, "a label repeated in one operand"),
    "too_many_operands": ("ij->i", [[2, 2], [2, 2]], BAD, "has 1 operands, the node 2"),
    "wrong_rank": ("ijk,kl->il", [[2, 3], [3, 4]], BAD, "labels 3 axes of a rank-2"),
    "mismatched_lengths": ("ij,jk->ik", [[2, 3], [4, 5]], BAD,
                           "label 'j' is 3 long in one operand and 4 in another"),
    "unknown_output_label": ("ij,jk->iz", [[2, 3], [3, 4]], BAD, "output label 'z'"),
    "bad_character": ("i$,jk->ik", [[2, 3], [3, 4]], BAD, "is not letters"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_einsum_refusals_name_the_node(flowc, tmp_path, case):
    equation, shapes, code, message = REFUSED[case]
    path = tmp_path / f"{case}.onnx"
    path.write_bytes(einsum_model(equation, shapes).SerializeToString())
    result = flowc.run("submit", path, "-o", tmp_path / "out.fca", check=False)
    assert result.returncode == code, result.stderr
    assert "node 'n' (Einsum)" in result.stderr and message in result.stderr, result.stderr
    assert not (tmp_path / "out.fca").exists()
