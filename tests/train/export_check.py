"""The PyTorch side of merak_export's test: the Merak-named export loads into the plain-PyTorch GPT
(python/merak_ref, whose forward the parity test holds to Merak's) with every name and shape
matching; the GPT-2-named export, read back by GPT-2's conventions (Conv1D weights stored
[in, out]), is the same weights: the same tensors exactly, and the same logits.

Usage: /usr/bin/python3 export_check.py MERAK.safetensors HF.safetensors LAYERS HIDDEN HEADS
       MAX_SEQ VOCAB
"""
import os
import re
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from merak_ref import models, st_io  # noqa: E402


def from_gpt2(name, array):
    """A GPT-2 tensor under the reference model's name and layout."""
    top = {"transformer.wte.weight": "wte.weight", "transformer.wpe.weight": "wpe.weight",
           "transformer.ln_f.weight": "ln_f.weight", "transformer.ln_f.bias": "ln_f.bias"}
    if name in top:
        return top[name], array
    m = re.fullmatch(r"transformer\.h\.(\d+)\.(ln_1|ln_2|attn\.c_attn|attn\.c_proj|mlp\.c_fc|"
                     r"mlp\.c_proj)\.(weight|bias)", name)
    if not m:
        raise SystemExit(f"FAIL: '{name}' is not a GPT-2 parameter name")
    layer, module, kind = m.groups()
    ours = {"ln_1": "ln_1", "ln_2": "ln_2", "attn.c_attn": "attn.qkv", "attn.c_proj": "attn.proj",
            "mlp.c_fc": "mlp.fc", "mlp.c_proj": "mlp.proj"}[module]
    conv1d = module not in ("ln_1", "ln_2") and kind == "weight"
    return f"blocks.{layer}.{ours}.{kind}", (array.T.copy() if conv1d else array)


def model_from(tensors, layers, hidden, heads, max_seq, vocab):
    model = models.Gpt(layers, hidden, heads, max_seq, vocab)
    state = {k: torch.from_numpy(v) for k, v in tensors.items()}
    model.load_state_dict(state, strict=True)  # every name, every shape
    return model.eval()


def main():
    merak_file, hf_file = sys.argv[1], sys.argv[2]
    layers, hidden, heads, max_seq, vocab = (int(a) for a in sys.argv[3:8])
    ours = st_io.load(merak_file)
    back = dict(from_gpt2(k, v) for k, v in st_io.load(hf_file).items())
    if sorted(back) != sorted(ours):
        raise SystemExit(f"FAIL: names differ: {sorted(set(back) ^ set(ours))}")
    for name, value in ours.items():
        if back[name].shape != value.shape or not np.array_equal(back[name], value):
            raise SystemExit(f"FAIL: '{name}' differs between the two exports")
    a = model_from(ours, layers, hidden, heads, max_seq, vocab)
    b = model_from(back, layers, hidden, heads, max_seq, vocab)
    tokens = torch.randint(vocab, (2, max_seq), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        la, lb = a.logits(tokens), b.logits(tokens)
    diff = float((la - lb).abs().max())
    if diff != 0:
        raise SystemExit(f"FAIL: logits differ by {diff}")
    print(f"export_check: {len(ours)} tensors load into the PyTorch GPT under both names; "
          f"logits equal (max |diff| {diff}), mean |logit| {float(la.abs().mean()):.4f}")


main()
