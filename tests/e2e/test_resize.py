"""Resize against onnxruntime: every coordinate_transformation_mode and
nearest_mode flowc takes (and cubic's coefficient and exclude_outside),
upsampling and downsampling by scales and by sizes, in one model of one
Resize node per combination; what it refuses fails in one line naming the
node."""
import itertools

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import onnxruntime_outputs, save

UNSUPPORTED, BAD = 4, 3
TRANSFORMS = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
              "tf_half_pixel_for_nn", "half_pixel_symmetric"]
NEAREST_MODES = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]
# Whole factors (a tile where nearest repeats in place), fractions both
# ways, sizes that do not divide, an axis shrunk to one element, and an
# axis left alone.
SPECS = [{"scales": [1, 1, 2, 2]}, {"scales": [1, 1, 0.6, 1.7]}, {"sizes": [1, 2, 3, 16]},
         {"sizes": [1, 2, 1, 9]}, {"scales": [1, 1, 3, 0.5]}, {"scales": [1, 1, 1, 2.5]}]


def combinations():
    for transform, spec in itertools.product(TRANSFORMS, SPECS):
        if transform != "tf_half_pixel_for_nn":  # a nearest-only mode
            yield "linear", transform, "round_prefer_floor", spec
        if transform != "half_pixel_symmetric":  # refused for nearest
            for rounding in NEAREST_MODES:
                yield "nearest", transform, rounding, spec


def resize_node(index, mode, transform, rounding, spec, inputs="x"):
    """Resize of `inputs` with its scales or sizes as initializers
    (an empty roi and, with sizes, an empty scales before them)."""
    scales = np.array(spec.get("scales", []), np.float32)
    inits = [numpy_helper.from_array(np.array([], np.float32), f"roi{index}"),
             numpy_helper.from_array(scales, f"scales{index}")]
    names = [inputs, f"roi{index}", f"scales{index}"]
    if "sizes" in spec:
        inits.append(numpy_helper.from_array(np.array(spec["sizes"], np.int64),
                                             f"sizes{index}"))
        names.append(f"sizes{index}")
    node = helper.make_node("Resize", names, [f"y{index}"], name=f"resize{index}", mode=mode,
                            coordinate_transformation_mode=transform, nearest_mode=rounding)
    return node, inits


def model_of(nodes, inits, outputs, opset=19):
    graph = helper.make_graph(
        nodes, "resize", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 5, 7])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, ["n", "c", "h", "w"])
         for name in outputs],
        inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=9)


def mismatches(flowc, path, cases, seed):
    """One model of one Resize node per case ((mode, transform, rounding,
    spec), extra attributes), run by flowc and onnxruntime: the cases whose
    output differs in shape or by more than 1e-5."""
    nodes, inits = [], []
    for index, (case, attributes) in enumerate(cases):
        node, node_inits = resize_node(index, *case)
        node.attribute.extend(helper.make_attribute(k, v) for k, v in attributes.items())
        nodes.append(node)
        inits += node_inits
    model = save(model_of(nodes, inits, [f"y{i}" for i in range(len(cases))]), path)
    flowc.submit(model)
    x = np.random.default_rng(seed).standard_normal((1, 2, 5, 7)).astype(np.float32)
    ours = flowc.execute(model.with_suffix(".fca"), {"x": x})
    expected = onnxruntime_outputs(model, {"x": x})
    wrong = []
    for i, case in enumerate(cases):
        got, want = ours[f"y{i}"], expected[f"y{i}"]
        if got.shape != want.shape:
            wrong.append((case, got.shape, want.shape))
        elif np.max(np.abs(got - want)) > 1e-5:
            wrong.append((case, float(np.max(np.abs(got - want)))))
    return wrong


def test_every_supported_combination_matches_onnxruntime(flowc, tmp_path):
    cases = [(case, {}) for case in combinations()]
    wrong = mismatches(flowc, tmp_path / "resize.onnx", cases, seed=5)
    assert not wrong, wrong
    assert len(cases) == 150


CUBIC_TRANSFORMS = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                    "half_pixel_symmetric"]
# onnxruntime's default (-0.75, edge taps kept) and PyTorch's bicubic's
# coefficient with the taps outside the axis dropped.
CUBIC_KERNELS = [{}, {"cubic_coeff_a": -0.5, "exclude_outside": 1}]


def test_cubic_matches_onnxruntime(flowc, tmp_path):
    cases = [(("cubic", transform, "round_prefer_floor", spec), kernel)
             for transform, spec, kernel in
             itertools.product(CUBIC_TRANSFORMS, SPECS, CUBIC_KERNELS)]
    wrong = mismatches(flowc, tmp_path / "cubic.onnx", cases, seed=6)
    assert not wrong, wrong
    assert len(cases) == 60


REFUSED = {
    "area": ({"mode": "area"}, {"scales": [1, 1, 2, 2]}, UNSUPPORTED,
             "mode 'area' is not supported (nearest, linear, cubic)"),
    "antialias": ({"mode": "linear", "antialias": 1}, {"scales": [1, 1, 0.5, 0.5]},
                  UNSUPPORTED, "antialias is not supported"),
    "crop_and_resize": ({"coordinate_transformation_mode": "tf_crop_and_resize"},
                        {"scales": [1, 1, 2, 2]}, UNSUPPORTED,
                        "coordinate_transformation_mode 'tf_crop_and_resize' is not supported"),
    "nearest_symmetric": ({"coordinate_transformation_mode": "half_pixel_symmetric"},
                          {"scales": [1, 1, 2, 2]}, UNSUPPORTED,
                          "'half_pixel_symmetric' is supported with mode 'linear' only"),
    "aspect_ratio": ({"keep_aspect_ratio_policy": "not_larger"}, {"sizes": [1, 2, 3, 16]},
                     UNSUPPORTED, "keep_aspect_ratio_policy 'not_larger' is not supported"),
    "neither": ({}, {}, BAD, "needs exactly one of scales and sizes"),
    "both": ({}, {"scales": [1, 1, 2, 2], "sizes": [1, 2, 10, 14]}, BAD,
             "needs exactly one of scales and sizes"),
    "count": ({}, {"scales": [2, 2]}, BAD, "scales has 2 values for 4 axes"),
    "zero_scale": ({}, {"scales": [1, 1, 0, 2]}, BAD,
                   "scale 0.000000 of axis 2 is not positive and finite"),
    "shrunk_away": ({}, {"scales": [1, 1, 0.1, 1]}, BAD,
                    "axis 2 would have 0 elements; the result needs some"),
    "huge": ({}, {"sizes": [1, 2, 5, 2**40]}, BAD, "size 1099511627776 of axis 3 is too large"),
    "bad_rounding": ({"nearest_mode": "sideways"}, {"scales": [1, 1, 2, 2]}, BAD,
                     "nearest_mode 'sideways' is not one of"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_what_is_refused_fails_in_one_line_naming_the_node(flowc, tmp_path, case):
    attributes, spec, code, message = REFUSED[case]
    inits = [numpy_helper.from_array(np.array([], np.float32), "roi"),
             numpy_helper.from_array(np.array(spec.get("scales", []), np.float32), "scales")]
    names = ["x", "roi", "scales"]
    if "sizes" in spec:
        inits.append(numpy_helper.from_array(np.array(spec["sizes"], np.int64), "sizes"))
        names.append("sizes")
    node = helper.make_node("Resize", names, ["y"], name="upsample", **attributes)
    # Unchecked: ONNX's checker refuses some of these itself.
    model = tmp_path / f"{case}.onnx"
    onnx.save(model_of([node], inits, ["y"]), model)
    result = flowc.run("submit", model, "-o", tmp_path / "out.fca", check=False)
    assert result.returncode == code, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert "node 'upsample' (Resize)" in result.stderr and message in result.stderr, \
        result.stderr
    assert not (tmp_path / "out.fca").exists()
