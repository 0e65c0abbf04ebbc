"""Exports GPT-2-style and BERT-style models (python/merak_ref) with torch.onnx.export, with
dynamic batch and sequence axes, and writes what the C++ side (onnx_parity.cc) checks against.

Usage: /usr/bin/python3 onnx_export.py OUT_DIR
       /usr/bin/python3 onnx_export.py --corpus OUT_DIR   (tiny exports only: the fuzzer's seeds)

For each case NAME it writes into OUT_DIR:
  NAME.onnx               the export (traced at batch 2, sequence 8)
  NAME_io.safetensors     inputs at another size (batch 3, sequence 20, so the dynamic axes
                          matter) and PyTorch's outputs for them, prefixed "out:"
  NAME_weights.safetensors  the parameters by name (GPT cases; the training check loads them
                          into Merak's own GPT)
Cases:
  gpt13   opset 13, constant folding on, random weights; its causal mask is a registered
          lower-triangular buffer sliced to the sequence length (GPT-2's own form; aten::triu
          has no ONNX form before opset 14)
  gpt17   opset 17, folding off (parameter names survive), GPT-2 initialisation (zero biases,
          unit norm weights: the exporter merges those equal tensors, which the importer must
          undo); causal mask from triu
  bert13  opset 13, folding on, random weights, MLM and NSP logits under a padding mask
  bert17  opset 17, folding off, the same with LayerNormalization as one op
It also writes gpt_train.safetensors: the token batch and targets for the training check.
"""
import json
import math
import os
import struct
import sys
import types
import warnings

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                "python"))
from merak_ref.models import Bert, Gpt  # noqa: E402

GPT = dict(layers=2, hidden=64, heads=4, max_seq=32, vocab=96)
BERT = dict(layers=2, hidden=64, heads=4, max_seq=32, vocab=100)
# Seeds for tools/fuzz: every structure of the test exports, in a few kilobytes each.
TINY = dict(layers=1, hidden=8, heads=2, max_seq=8, vocab=16)
TRACE_SHAPE = (2, 8)
RUN_SHAPE = (3, 20)


def save_safetensors(path, tensors):
    """{name: numpy array} as safetensors: 8-byte header length, JSON header, raw data."""
    names = {"float32": "F32", "int64": "I64", "bool": "BOOL"}
    header, blobs, offset = {}, [], 0
    for name, a in sorted(tensors.items()):
        blob = a.astype(a.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": names[a.dtype.name], "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def gpt2_init(model, gen):
    """N(0, 0.02) matrices and embeddings, unit norm weights, zero biases (as Merak's GPT)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
            else:
                p.fill_(1.0 if name.endswith("ln_1.weight") or name.endswith("ln_2.weight")
                        or name.endswith("ln_f.weight") or "_ln." in name else 0.0)


def random_init(model, gen):
    """Every parameter random, so a wrongly mapped bias or norm weight shows in the logits."""
    gpt2_init(model, gen)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() < 2:
                p.add_(torch.randn(p.shape, generator=gen) * 0.1)


def buffer_mask_forward(self, x, key_padding_mask=None):
    """SelfAttention.forward with the causal mask sliced from a buffer, as GPT-2 does."""
    b, t, c = x.shape
    d = c // self.heads
    q, k, v = self.qkv(x).view(b, t, 3, self.heads, d).permute(2, 0, 3, 1, 4)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(d)
    scores = torch.where(self.tril[:t, :t], scores, torch.tensor(float("-inf")))
    return self.proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, c))


class GptLogits(Gpt):
    def forward(self, tokens):
        return self.logits(tokens)


class BertHeads(Bert):
    """BERT's MLM and NSP logits (the loss module's heads, without the losses)."""

    def forward(self, tokens, segment_ids, attention_mask):
        h = self.encode(tokens, segment_ids, attention_mask)
        m = self.mlm_ln(F.gelu(self.mlm_dense(h)))
        mlm = m @ self.word.weight.t() + self.mlm_bias
        nsp = self.nsp(torch.tanh(self.pooler(h[:, 0])))
        return mlm, nsp


def export(model, name, opset, fold, inputs, input_names, output_names, out_dir):
    traced = tuple(torch.zeros(TRACE_SHAPE, dtype=x.dtype) for x in inputs)
    if "attention_mask" in input_names:
        traced = traced[:2] + (torch.ones(TRACE_SHAPE, dtype=torch.bool),)
    axes = {n: {0: "batch", 1: "seq"} for n in input_names}
    torch.onnx.export(model, traced, os.path.join(out_dir, name + ".onnx"), opset_version=opset,
                      do_constant_folding=fold, input_names=input_names,
                      output_names=output_names, dynamic_axes=axes)
    with torch.no_grad():
        outs = model(*inputs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    tensors = {n: x.numpy() for n, x in zip(input_names, inputs)}
    tensors.update({"out:" + n: y.numpy() for n, y in zip(output_names, outs)})
    save_safetensors(os.path.join(out_dir, name + "_io.safetensors"), tensors)


def gpt_case(name, opset, fold, init, buffer_mask, tokens, out_dir, gen, config=GPT):
    model = GptLogits(**config).eval()
    init(model, gen)
    if buffer_mask:
        ones = torch.ones(config["max_seq"], config["max_seq"], dtype=torch.bool)
        for block in model.blocks:
            block.attn.register_buffer("tril", torch.tril(ones))
            block.attn.forward = types.MethodType(buffer_mask_forward, block.attn)
    save_safetensors(os.path.join(out_dir, name + "_weights.safetensors"),
               {n: p.detach().numpy() for n, p in model.named_parameters()})
    export(model, name, opset, fold, (tokens,), ["tokens"], ["logits"], out_dir)


def bert_case(name, opset, fold, inputs, out_dir, gen, config=BERT):
    model = BertHeads(**config).eval()
    random_init(model, gen)
    export(model, name, opset, fold, inputs, ["tokens", "segment_ids", "attention_mask"],
           ["mlm_logits", "nsp_logits"], out_dir)


def corpus(out_dir, gen):
    """Tiny GPT and BERT exports across opsets 13 to 17, folding on and off."""
    tokens = torch.randint(0, TINY["vocab"], (2, 5), generator=gen)
    mask = torch.ones(2, 5, dtype=torch.bool)
    mask[1, 3:] = False
    bert_inputs = (tokens, torch.zeros_like(tokens), mask)
    for opset in (13, 14, 15, 16, 17):
        for fold in (True, False):
            tag = f"{opset}_{'fold' if fold else 'nofold'}"
            gpt_case("gpt_" + tag, opset, fold, random_init, opset == 13, tokens, out_dir, gen,
                     TINY)
            bert_case("bert_" + tag, opset, fold, bert_inputs, out_dir, gen, TINY)
    for f in os.listdir(out_dir):
        if not f.endswith(".onnx"):
            os.remove(os.path.join(out_dir, f))


def main():
    warnings.filterwarnings("ignore")  # the tracer's notes on shape-dependent Python code
    gen = torch.Generator().manual_seed(2024)
    if sys.argv[1] == "--corpus":
        os.makedirs(sys.argv[2], exist_ok=True)
        corpus(sys.argv[2], gen)
        return
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    b, t = RUN_SHAPE
    tokens = torch.randint(0, GPT["vocab"], (b, t + 1), generator=gen)
    save_safetensors(os.path.join(out_dir, "gpt_train.safetensors"),
               {"tokens": tokens[:, :-1].numpy(), "targets": tokens[:, 1:].numpy()})
    gpt_case("gpt13", 13, True, random_init, True, tokens[:, :-1], out_dir, gen)
    gpt_case("gpt17", 17, False, gpt2_init, False, tokens[:, :-1], out_dir, gen)

    words = torch.randint(1, BERT["vocab"], (b, t), generator=gen)
    mask = torch.ones(b, t, dtype=torch.bool)
    mask[1, 13:] = False  # row 1 is padded after 13 tokens
    words[~mask] = 0
    segments = torch.zeros(b, t, dtype=torch.long)
    segments[:, t // 2:] = 1
    segments[~mask] = 0
    for name, opset, fold in (("bert13", 13, True), ("bert17", 17, False)):
        bert_case(name, opset, fold, (words, segments, mask), out_dir, gen)
    print("onnx_export: wrote gpt13, gpt17, bert13, bert17 to", out_dir)


if __name__ == "__main__":
    main()
