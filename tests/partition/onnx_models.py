"""Exports small GPT-2-style and BERT-style models (python/merak_ref) to ONNX with PyTorch for
the partitioner's tensor-parallel test: opset 17 without constant folding (linears stay Gemm or
MatMul + Add with parameter names) and opset 14 with folding (weights pre-transposed into new
constants), each with dynamic batch and sequence axes.

Usage: /usr/bin/python3 onnx_models.py OUT_DIR   (writes gpt14, gpt17, bert14, bert17 .onnx)
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from merak_ref.models import BertHeads, GptLogits  # noqa: E402

SIZE = dict(layers=2, hidden=64, heads=4, max_seq=32)


def randomise(model, gen):
    """Every parameter random (biases and norms too), so a misplaced shard shows."""
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * (0.05 if p.dim() >= 2 else 0.2))


def export(model, path, opset, fold, names, outputs):
    shape = (2, 8)
    args = tuple(torch.ones(shape, dtype=torch.bool) if n == "attention_mask"
                 else torch.zeros(shape, dtype=torch.long) for n in names)
    torch.onnx.export(model.eval(), args, path, opset_version=opset, do_constant_folding=fold,
                      input_names=names, output_names=outputs,
                      dynamic_axes={n: {0: "batch", 1: "seq"} for n in names})


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    gen = torch.Generator().manual_seed(3)
    for opset, fold in ((14, True), (17, False)):
        gpt = GptLogits(vocab=96, **SIZE)
        randomise(gpt, gen)
        export(gpt, os.path.join(out, f"gpt{opset}.onnx"), opset, fold, ["tokens"], ["logits"])
        bert = BertHeads(vocab=100, **SIZE)
        randomise(bert, gen)
        export(bert, os.path.join(out, f"bert{opset}.onnx"), opset, fold,
               ["tokens", "segment_ids", "attention_mask"], ["mlm_logits", "nsp_logits"])


if __name__ == "__main__":
    main()
