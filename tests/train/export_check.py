"""The PyTorch side of merak_export's test (python/merak_ref's GPT, whose forward the parity test
holds to Merak's).

  export_check.py prepare MERAK.safetensors HF.safetensors OUT_DIR LAYERS HIDDEN HEADS MAX_SEQ VOCAB
      The two exports hold the same weights (every GPT-2 name maps to a Merak one; GPT-2's
      Conv1D weights are the transposes; the values equal); the GPT-2-named file loads into the
      PyTorch GPT with every name and shape matching. Writes into OUT_DIR:
        tokens.safetensors          a batch of tokens
        export_logits.safetensors   PyTorch's logits with the exported weights
        torch_gpt2.safetensors      a GPT PyTorch initialised (every tensor random, biases and
                                    norms too), under GPT-2's names and layout
        torch_logits.safetensors    PyTorch's logits with those weights
  export_check.py compare OURS.safetensors REFERENCE.safetensors LABEL
      Merak's logits against PyTorch's: max |difference| <= 1e-5 * max |reference logit|.
"""
import os
import re
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from merak_ref import models, st_io  # noqa: E402

TOLERANCE = 1e-5
MODULES = {"ln_1": "ln_1", "ln_2": "ln_2", "attn.c_attn": "attn.qkv", "attn.c_proj": "attn.proj",
           "mlp.c_fc": "mlp.fc", "mlp.c_proj": "mlp.proj"}
TOP = {"transformer.wte.weight": "wte.weight", "transformer.wpe.weight": "wpe.weight",
       "transformer.ln_f.weight": "ln_f.weight", "transformer.ln_f.bias": "ln_f.bias"}


def from_gpt2(name, array):
    """A GPT-2 tensor under the reference model's name and layout."""
    if name in TOP:
        return TOP[name], array
    m = re.fullmatch(r"transformer\.h\.(\d+)\.(ln_1|ln_2|attn\.c_attn|attn\.c_proj|mlp\.c_fc|"
                     r"mlp\.c_proj)\.(weight|bias)", name)
    if not m:
        raise SystemExit(f"FAIL: '{name}' is not a GPT-2 parameter name")
    layer, module, kind = m.groups()
    conv1d = module not in ("ln_1", "ln_2") and kind == "weight"
    return f"blocks.{layer}.{MODULES[module]}.{kind}", (array.T.copy() if conv1d else array)


def to_gpt2(name, array):
    """The reverse: a reference-model tensor under GPT-2's name and layout."""
    top = {v: k for k, v in TOP.items()}
    if name in top:
        return top[name], array
    m = re.fullmatch(r"blocks\.(\d+)\.(ln_1|ln_2|attn\.qkv|attn\.proj|mlp\.fc|mlp\.proj)\."
                     r"(weight|bias)", name)
    if not m:
        raise SystemExit(f"FAIL: '{name}' has no GPT-2 name")
    layer, module, kind = m.groups()
    theirs = {v: k for k, v in MODULES.items()}[module]
    conv1d = module not in ("ln_1", "ln_2") and kind == "weight"
    return f"transformer.h.{layer}.{theirs}.{kind}", (array.T.copy() if conv1d else array)


def model_from(tensors, dims):
    model = models.Gpt(*dims)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in tensors.items()}, strict=True)
    return model.eval()


def logits_of(model, tokens):
    with torch.no_grad():
        return model.logits(torch.from_numpy(tokens)).numpy()


def prepare(merak_file, hf_file, out, dims):
    layers, hidden, heads, max_seq, vocab = dims
    ours = st_io.load(merak_file)
    back = dict(from_gpt2(k, v) for k, v in st_io.load(hf_file).items())
    if sorted(back) != sorted(ours):
        raise SystemExit(f"FAIL: names differ: {sorted(set(back) ^ set(ours))}")
    for name, value in ours.items():
        if back[name].shape != value.shape or not np.array_equal(back[name], value):
            raise SystemExit(f"FAIL: '{name}' differs between the two exports")
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(vocab, (2, max_seq), generator=g).numpy()
    st_io.save(os.path.join(out, "tokens.safetensors"), {"tokens": tokens})
    exported = logits_of(model_from(back, dims), tokens)
    st_io.save(os.path.join(out, "export_logits.safetensors"), {"logits": exported})

    # The way back: weights of PyTorch's own making, saved as a GPT-2 checkpoint would be.
    torch.manual_seed(7)
    model = models.init_gpt2(models.Gpt(*dims))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:  # biases and norms off their defaults, so a misplaced one shows
                p.add_(0.02 * torch.randn(p.shape))
    own = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    st_io.save(os.path.join(out, "torch_gpt2.safetensors"),
               dict(to_gpt2(k, v) for k, v in own.items()))
    st_io.save(os.path.join(out, "torch_logits.safetensors"),
               {"logits": logits_of(model.eval(), tokens)})
    print(f"export_check: {len(ours)} tensors under both namings, equal; the GPT-2-named export "
          f"loads into PyTorch's GPT (mean |logit| {float(np.abs(exported).mean()):.4f})")


def compare(ours_file, ref_file, label):
    ours, ref = st_io.load(ours_file)["logits"], st_io.load(ref_file)["logits"]
    if ours.shape != ref.shape:
        raise SystemExit(f"FAIL: {label}: logits of shape {ours.shape}, PyTorch's {ref.shape}")
    diff = float(np.abs(ours.astype(np.float64) - ref).max())
    scale = float(np.abs(ref).max())
    print(f"export_check: {label}: Merak's logits vs PyTorch's: max |diff| {diff:.3g}, "
          f"{diff / scale:.3g} of max |logit| {scale:.4f} (tolerance {TOLERANCE:g})")
    if not diff <= TOLERANCE * scale:
        raise SystemExit(f"FAIL: {label}: logits differ by {diff / scale:.3g} of the largest")


def main():
    if len(sys.argv) == 10 and sys.argv[1] == "prepare":
        prepare(sys.argv[2], sys.argv[3], sys.argv[4], [int(a) for a in sys.argv[5:10]])
    elif len(sys.argv) == 5 and sys.argv[1] == "compare":
        compare(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        raise SystemExit(__doc__)


main()
