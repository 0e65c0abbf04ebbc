"""Reads the safetensors format by hand (there is no `safetensors` package here): an 8-byte
little-endian header length, a JSON header {name: {dtype, shape, data_offsets}} (plus an optional
__metadata__), then the raw little-endian buffer."""
import json
import struct

import numpy as np

_DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I32": np.int32,
           "I64": np.int64, "BOOL": np.bool_, "U8": np.uint8}


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
    """Writes {name: numpy array} as a .safetensors file, in the given order, the header padded
    with spaces to a multiple of 8 bytes."""
    names = {np.dtype(v).newbyteorder("<"): k for k, v in _DTYPES.items()}
    header, offset, blobs = {}, 0, []
    for name, array in tensors.items():
        a = np.ascontiguousarray(array)
        dt = a.dtype.newbyteorder("<")
        if dt not in names:
            raise ValueError(f"{path}: tensor '{name}' has unsupported dtype {a.dtype}")
        blob = a.astype(dt, copy=False).tobytes()
        header[name] = {"dtype": names[dt], "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)
