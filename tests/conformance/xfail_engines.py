"""Known failures of the ONNX node conformance suite per engine (rlx.load(engine=...)):
case name -> why. Exact like `xfail.XFAIL`: a listed case that passes, or an unlisted one
that fails, fails the test. Cases `xfail.XFAIL` lists (the numpy engine cannot import or
run them) are not run through the other engines.

"plain X gives the same" means running the original ONNX case directly on X (no rlx)
fails the same way: the difference is X's, not the export's.
"""

from __future__ import annotations

_ORT_RESIZE = ("onnxruntime's Resize with align_corners while downsampling differs from the "
               "reference (plain onnxruntime on the case gives the same error)")
_ORT_BATCHWISE = ("onnxruntime's CPU recurrences refuse layout=1 (batch first): "
                  "'Batchwise recurrent operations (layout == 1) are not supported'")
_BITCAST = "a bit cast (BitCast) needs ONNX opset 26; rlx exports opset 20"
_FLOAT_MOD = ("float Mod with fmod=0 is exported as a - floor(a / b) * b (ONNX Mod needs "
              "fmod=1 for floats); its inf/nan/-0 edge cases differ from numpy's")
_FFT_NOISE = ("expected values carry numpy's float32 FFT rounding (1.9e-7 where the exact "
              "value is ~1e-15) above the case's atol (1e-7); the export computes the "
              "transform in float64 (plain onnxruntime's DFT fails every test_dft case, by "
              "up to 2.4e-4)")

ONNXRUNTIME: dict[str, str] = {
    "test_resize_downsample_scales_cubic_align_corners": _ORT_RESIZE,
    "test_resize_downsample_scales_linear_align_corners": _ORT_RESIZE,
    "test_gru_batchwise": _ORT_BATCHWISE,
    "test_lstm_batchwise": _ORT_BATCHWISE,
    "test_simple_rnn_batchwise": _ORT_BATCHWISE,
    "test_bitcast_2d_float32_to_int32": _BITCAST,
    "test_bitcast_float32_to_int32": _BITCAST,
    "test_bitcast_int32_to_float32": _BITCAST,
    "test_bitcast_scalar_float32_to_int32": _BITCAST,
    "test_mod_float_edge_cases_fmod_0_float32": _FLOAT_MOD,
    "test_dft_inverse": _FFT_NOISE,
    "test_dft_inverse_opset19": _FFT_NOISE,
}
"""onnxruntime: the float32 group."""

_OV_RESIZE = ("OpenVINO's Resize (cubic / antialias / align_corners downsampling) differs from "
              "the reference (plain OpenVINO gives the same error)")
_OV_RESIZE_MODE = ("OpenVINO's ONNX frontend does not convert Resize with this coordinate "
                   "transformation (plain OpenVINO refuses the case too)")
_OV_DYNAMIC_RANK = ("Unsqueeze with run-time axes has an output rank OpenVINO's CPU plugin "
                    "cannot know ('CPU plug-in doesn't support ... dynamic rank'; plain "
                    "OpenVINO too)")


def _each(reason: str, *names: str) -> dict[str, str]:
    return dict.fromkeys(names, reason)


OPENVINO: dict[str, str] = {
    **_each(_OV_RESIZE, "test_resize_downsample_scales_cubic_A_n0p5_exclude_outside",
            "test_resize_downsample_scales_cubic_align_corners",
            "test_resize_downsample_scales_cubic_antialias",
            "test_resize_downsample_scales_linear_align_corners",
            "test_resize_downsample_scales_linear_antialias",
            "test_resize_downsample_sizes_cubic_antialias",
            "test_resize_downsample_sizes_linear_antialias",
            "test_resize_upsample_scales_cubic_A_n0p5_exclude_outside"),
    **_each(_OV_RESIZE_MODE, "test_resize_downsample_scales_linear_half_pixel_symmetric",
            "test_resize_upsample_scales_linear_half_pixel_symmetric",
            "test_resize_tf_crop_and_resize", "test_resize_tf_crop_and_resize_axes_2_3",
            "test_resize_tf_crop_and_resize_axes_3_2",
            "test_resize_tf_crop_and_resize_extrapolation_value"),
    **_each(_OV_DYNAMIC_RANK, "test_unsqueeze_axis_0", "test_unsqueeze_axis_1",
            "test_unsqueeze_axis_2", "test_unsqueeze_negative_axes", "test_unsqueeze_three_axes",
            "test_unsqueeze_two_axes", "test_unsqueeze_unsorted_axes"),
    "test_maxpool_2d_ceil_output_size_reduce_by_one": (
        "OpenVINO's MaxPool keeps a ceil-mode window that starts in the end padding (output "
        "2x2, expected 1x1; plain OpenVINO too)"),
    "test_reduce_max_empty_set": (
        "OpenVINO's ReduceMax over an empty axis does not give -inf (plain OpenVINO too)"),
    "test_tile": "OpenVINO's Tile of this case differs from the reference (plain OpenVINO too)",
    "test_shape_start_greater_than_end": (
        "the folded result is an empty i64 constant [0]; OpenVINO returns it as shape []"),
}
"""OpenVINO (exact precision): the float32 common ops group."""

TABLES = {"onnxruntime": (ONNXRUNTIME, "float32"), "openvino": (OPENVINO, "float32_common")}
