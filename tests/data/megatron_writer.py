#!/usr/bin/python3
"""An independent writer of Megatron-LM indexed datasets (PREFIX.bin + PREFIX.idx), written from
the format's description in merak/data/README.md, for megatron_test to read back.

usage: megatron_writer.py PREFIX DTYPE DOCUMENTS

Document d has (d % 3) + 1 sequences; sequence j of document d has (5 d + 3 j) % 11 tokens,
token i being (1000 d + 100 j + 7 i) % 60000 plus an offset per dtype (uint16: 0, int32:
100000, int64: 2**33; uint8: the value mod 256).
"""
import struct
import sys

import numpy as np

CODES = {"uint8": 1, "int8": 2, "int16": 3, "int32": 4, "int64": 5, "float64": 6,
         "float32": 7, "uint16": 8}
OFFSETS = {"uint16": 0, "int32": 100000, "int64": 2**33}


def main():
    prefix, dtype, documents = sys.argv[1], sys.argv[2], int(sys.argv[3])
    np_dtype = np.dtype(dtype).newbyteorder("<")
    sequences = []      # token arrays, in order
    doc_starts = [0]    # sequence index where each document starts, then the total
    for d in range(documents):
        for j in range(d % 3 + 1):
            values = [(1000 * d + 100 * j + 7 * i) % 60000 for i in range((5 * d + 3 * j) % 11)]
            if dtype == "uint8":
                values = [v % 256 for v in values]
            else:
                values = [v + OFFSETS[dtype] for v in values]
            sequences.append(np.array(values, dtype=np_dtype))
        doc_starts.append(len(sequences))

    with open(prefix + ".bin", "wb") as f:
        for s in sequences:
            f.write(s.tobytes())

    sizes = np.array([len(s) for s in sequences], dtype="<i4")
    # Each sequence's byte offset in the .bin: the bytes of all sequences before it.
    pointers = np.zeros(len(sequences), dtype="<i8")
    if len(sequences) > 1:
        pointers[1:] = np.cumsum(sizes[:-1].astype(np.int64)) * np_dtype.itemsize
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", CODES[dtype]))
        f.write(struct.pack("<Q", len(sequences)))
        f.write(struct.pack("<Q", len(doc_starts)))
        f.write(sizes.tobytes())
        f.write(pointers.tobytes())
        f.write(np.array(doc_starts, dtype="<i8").tobytes())


if __name__ == "__main__":
    main()
