"""Writes one network of python/merak_ref (the GPT or BERT Merak builds) two ways for the ONNX
training test: its weights as safetensors under Merak's names, and the network exported by PyTorch
to ONNX (opset 17, no constant folding, so the initializers keep those names) with its inputs
named after Merak's batch fields and dynamic batch and sequence axes.

Usage: /usr/bin/python3 onnx_export.py gpt|bert OUT_DIR LAYERS HIDDEN HEADS MAX_SEQ VOCAB
           [--name NAME] [--fixed BATCH SEQ] [--reads-targets] [--dropout P] [--external]
           [--fold]
  writes OUT_DIR/NAME.onnx and OUT_DIR/NAME.safetensors (NAME: the family);
  --fixed: inputs of that fixed shape, no dynamic axes;
  --reads-targets (gpt): the network takes `targets` too (adding 0 times their mean), as a
  network that reads a label does;
  --dropout: the network drops at rate P where Merak's models do, exported in training mode
  (Dropout nodes with training_mode true), as a network exported for training is;
  --external: the weights saved as ONNX external data, in OUT_DIR/NAME.data beside the graph (as
  an export past protobuf's 2 GiB must be);
  --fold: exported with PyTorch's constant folding (its default), which stores each linear's
  weight transposed under a new name, the tied LM head's among them.
"""
import os
import sys

import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "python"))
from merak_ref import st_io  # noqa: E402
from merak_ref.models import BertHeads, GptLogits  # noqa: E402


class GptReadsTargets(GptLogits):
    def forward(self, tokens, targets):
        return self.logits(tokens) + 0.0 * targets.float().mean()


def main():
    family, out = sys.argv[1], sys.argv[2]
    layers, hidden, heads, max_seq, vocab = (int(a) for a in sys.argv[3:8])
    rest = sys.argv[8:]
    name, shape, reads_targets, dropout, external, fold = family, None, False, 0.0, False, False
    while rest:
        if rest[0] == "--name":
            name, rest = rest[1], rest[2:]
        elif rest[0] == "--fixed":
            shape, rest = (int(rest[1]), int(rest[2])), rest[3:]
        elif rest[0] == "--reads-targets":
            reads_targets, rest = True, rest[1:]
        elif rest[0] == "--dropout":
            dropout, rest = float(rest[1]), rest[2:]
        elif rest[0] == "--external":
            external, rest = True, rest[1:]
        elif rest[0] == "--fold":
            fold, rest = True, rest[1:]
        else:
            sys.exit(f"unknown option {rest[0]}")
    torch.manual_seed(5)
    size = dict(layers=layers, hidden=hidden, heads=heads, max_seq=max_seq, vocab=vocab,
                dropout=dropout)
    if family == "gpt":
        model = GptReadsTargets(**size) if reads_targets else GptLogits(**size)
        inputs = ["tokens", "targets"] if reads_targets else ["tokens"]
        outputs = ["logits"]
    else:
        model = BertHeads(**size)
        inputs, outputs = ["tokens", "segment_ids", "attention_mask"], ["mlm_logits", "nsp_logits"]
    with torch.no_grad():  # biases and norms random too, so a misplaced one shows
        for p in model.parameters():
            p.copy_(torch.randn(p.shape) * (0.1 if p.dim() >= 2 else 0.2))
    os.makedirs(out, exist_ok=True)
    st_io.save(os.path.join(out, name + ".safetensors"),
               {n: p.detach().numpy() for n, p in model.named_parameters()})
    args = tuple(torch.ones(shape or (2, 8), dtype=torch.bool) if n == "attention_mask"
                 else torch.zeros(shape or (2, 8), dtype=torch.long) for n in inputs)
    axes = {} if shape else {n: {0: "batch", 1: "seq"} for n in inputs}
    mode = torch.onnx.TrainingMode.TRAINING if dropout > 0 else torch.onnx.TrainingMode.EVAL
    path = os.path.join(out, name + ".onnx")
    torch.onnx.export(model.train(dropout > 0), args, path,
                      opset_version=17, do_constant_folding=fold, input_names=inputs,
                      output_names=outputs, dynamic_axes=axes, training=mode)
    if external:
        import onnx
        onnx.save_model(onnx.load(path), path, save_as_external_data=True,
                        all_tensors_to_one_file=True, location=name + ".data", size_threshold=0)


if __name__ == "__main__":
    main()
