"""The importance of each weight value (rlx.baking.importance): the mean square of the
activation channel it multiplies over the calibration feeds, checked against float64 numpy
on a MatMul (batched activation), a Conv and a grouped Conv; and a plan given it stores
streams whose weighted error is no worse than the unweighted search's."""

from __future__ import annotations

import numpy as np

from rlx.baking.importance import input_importance
from rlx.codecs import Encoding, decode_rows
from rlx.ir import Graph, Shape
from rlx.ir.ops.windows import Conv
from rlx.passes.weight_encoding import apply_weight_encodings, plan_weight_encodings

RNG = np.random.default_rng(3)
WEIGHTS = {"w": RNG.standard_normal((64, 48)).astype(np.float32),
           "k1": RNG.standard_normal((16, 8, 3, 3)).astype(np.float32),
           "k2": RNG.standard_normal((32, 4, 3, 3)).astype(np.float32),
           "k3": RNG.standard_normal((16, 32, 1, 1)).astype(np.float32)}


def _graph():
    """x [2, 5, 64] @ w [64, 48]; image [2, 8, 10, 10] through a 3x3 conv (8 -> 16) and a
    grouped 3x3 conv (16 -> 32, 4 groups); wide [2, 32, 6, 6] through a 1x1 conv (32 -> 16:
    rows of whole blocks, stored row by row)."""
    g = Graph("importance")
    x = g.input("x", Shape([2, 5, 64]))
    image = g.input("image", Shape([2, 8, 10, 10]))
    w = g.constant(WEIGHTS["w"], name="w")
    k1 = g.constant(WEIGHTS["k1"], name="k1")
    k2 = g.constant(WEIGHTS["k2"], name="k2")
    wide = g.input("wide", Shape([2, 32, 6, 6]))
    k3 = g.constant(WEIGHTS["k3"], name="k3")
    conv3 = g.add_node(Conv(strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1)), (wide, k3))
    conv1 = g.add_node(Conv(strides=(1, 1), pads=(1, 1, 1, 1), dilations=(1, 1)),
                       (image, k1))
    conv2 = g.add_node(Conv(strides=(1, 1), pads=(1, 1, 1, 1), dilations=(1, 1), groups=4),
                       (conv1, k2))
    g.set_outputs([g.matmul(x, w), conv2, conv3])
    return g, w, k1, k2, k3


def _feeds(seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 5, 64)).astype(np.float32) * np.linspace(0.1, 3, 64)
    image = rng.standard_normal((2, 8, 10, 10)) * np.arange(1, 9)[:, None, None]
    wide = rng.standard_normal((2, 32, 6, 6)) * rng.uniform(0, 4, 32)[:, None, None]
    return {"x": x.astype(np.float32), "image": image.astype(np.float32),
            "wide": wide.astype(np.float32)}


def _conv(x, k):
    """A 3x3 conv, pads 1, stride 1, one group, in float64."""
    n, c, h, w = x.shape
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, k.shape[0], h, w))
    for dy in range(3):
        for dx in range(3):
            out += np.einsum("nchw,oc->nohw", padded[:, :, dy:dy + h, dx:dx + w], k[:, :, dy, dx])
    return out


def test_importance_is_the_mean_square_of_each_weight_value_s_input_channel():
    g, w, k1, k2, k3 = _graph()
    feeds = [_feeds(s) for s in range(3)]
    found = input_importance(g, feeds)
    x = np.stack([f["x"] for f in feeds]).astype(np.float64)
    image = np.stack([f["image"] for f in feeds]).astype(np.float64)
    mid = np.stack([_conv(i, WEIGHTS["k1"].astype(np.float64)) for i in image])
    want_w = (x ** 2).mean(axis=(0, 1, 2))  # [64]: K
    want_k1 = (image ** 2).mean(axis=(0, 1, 3, 4))  # [8]: input channels
    by_channel = (mid ** 2).mean(axis=(0, 1, 3, 4))  # [16], 4 groups of 4
    want_k2 = np.repeat(by_channel.reshape(4, 4), 8, axis=0)  # output o reads group o // 8
    wide = np.stack([f["wide"] for f in feeds]).astype(np.float64)
    want_k3 = (wide ** 2).mean(axis=(0, 1, 3, 4))
    np.testing.assert_allclose(np.broadcast_to(found[w], (64, 48)),
                               np.broadcast_to(want_w[:, None], (64, 48)), rtol=1e-5)
    np.testing.assert_allclose(np.broadcast_to(found[k1], (16, 8, 3, 3)),
                               np.broadcast_to(want_k1[None, :, None, None], (16, 8, 3, 3)),
                               rtol=1e-5)
    np.testing.assert_allclose(np.broadcast_to(found[k2], (32, 4, 3, 3)),
                               np.broadcast_to(want_k2[:, :, None, None], (32, 4, 3, 3)),
                               rtol=1e-5)
    np.testing.assert_allclose(np.broadcast_to(found[k3], (16, 32, 1, 1)),
                               np.broadcast_to(want_k3[None, :, None, None], (16, 32, 1, 1)),
                               rtol=1e-5)


def _decoded(graph, choice):
    """The weight a choice's stream decodes to, in float64 and the weight's shape."""
    encoded, _ = apply_weight_encodings(graph, [choice])
    stream = next(n.op.data for n in encoded.nodes() if n.name == choice.name
                  and n.tensor_shape.dtype.numpy == np.uint8)
    rows, length = choice.rows, choice.row_length
    stored = decode_rows(choice.encoding, np.asarray(stream), rows, length).reshape(rows, -1)
    shape = tuple(choice.shape[p] for p in choice.perm) if choice.perm else choice.shape
    values = stored.reshape(shape)
    if choice.perm:
        values = values.transpose(np.argsort(choice.perm))
    return values.astype(np.float64)


def test_a_weighted_plan_stores_streams_no_worse_in_the_weighted_error():
    g, *_ = _graph()
    importance = input_importance(g, [_feeds(s) for s in range(3)])
    weighted = plan_weight_encodings(g, searched=True, importance=importance)
    unweighted = {c.node_id: c for c in plan_weight_encodings(g, searched=True).choices}
    assert {c.node_id for c in weighted.choices} == set(importance)
    for choice in weighted.choices:
        assert choice.encoding is Encoding.GGUF_Q8_0 and not choice.scale_rows, choice
        assert choice.rows == (16 if choice.name == "k3" else 48 if choice.name == "w" else 1)
        values = WEIGHTS[choice.name].astype(np.float64)
        imp = np.broadcast_to(importance[choice.node_id], values.shape)
        errors = [float((imp * (values - _decoded(g, c)) ** 2).sum())
                  for c in (choice, unweighted[choice.node_id])]
        assert errors[0] <= errors[1], (choice.name, errors)


def test_identical_weights_share_the_mean_importance_of_all_their_readers():
    """Two copies of one weight (an unrolled recurrent export's steps) read different
    activations; the bake merges identical streams after encoding, so both get one
    importance: the mean over both readers."""
    g = Graph("copies")
    a, b = g.input("a", Shape([4, 64])), g.input("b", Shape([4, 64]))
    w = WEIGHTS["w"]
    first, second = g.constant(w.copy(), name="first"), g.constant(w.copy(), name="second")
    g.set_outputs([g.matmul(a, first), g.matmul(b, second)])
    rng = np.random.default_rng(9)
    feeds = [{"a": rng.standard_normal((4, 64)).astype(np.float32),
              "b": 3 * rng.standard_normal((4, 64)).astype(np.float32)} for _ in range(2)]
    found = input_importance(g, feeds)
    both = np.stack([np.stack([f["a"], f["b"]]) for f in feeds]).astype(np.float64)
    want = (both ** 2).mean(axis=(0, 1, 2))
    np.testing.assert_allclose(found[first].reshape(-1), want, rtol=1e-5)
    assert found[second] is found[first]
