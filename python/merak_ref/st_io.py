"""The safetensors format by hand (no `safetensors` package here): an 8-byte little-endian header
length, a JSON header {name: {dtype, shape, data_offsets}} (plus an optional __metadata__), then
the raw little-endian buffer."""
import json
import struct

import numpy as np

_DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I32": np.int32,
           "I64": np.int64, "BOOL": np.bool_, "U8": np.uint8}
_NAMES = {np.dtype(v): k for k, v in _DTYPES.items()}


def load(path):
    """{name: numpy array} of a .safetensors file."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: too short for a safetensors header")
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise ValueError(f"{path}: header length {n} runs past the end of the file")
    header = json.loads(raw[8:8 + n])
    body = memoryview(raw)[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] not in _DTYPES:
            raise ValueError(f"{path}: tensor '{name}' has unsupported dtype {info['dtype']}")
        begin, end = info["data_offsets"]
        dt = np.dtype(_DTYPES[info["dtype"]]).newbyteorder("<")
        out[name] = np.frombuffer(body[begin:end], dtype=dt).reshape(info["shape"]).copy()
    return out


def save(path, tensors):
    """Writes {name: numpy array} (in sorted name order)."""
    header, chunks, offset = {}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        a = a.astype(a.dtype.newbyteorder("<"), copy=False)
        data = a.tobytes()
        header[name] = {"dtype": _NAMES[np.dtype(a.dtype.type)], "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)  # pad so the buffer starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for c in chunks:
            f.write(c)
