"""PyTorch side of bench_train_vs_torch: python/merak_ref's GPT trained for a few steps on one
shape (forward, backward, clip_grad_norm_ at 1.0, torch.optim.AdamW), timed like the Merak side.
Prints which BLAS library torch has loaded, per-step times on stderr, and one line
`RESULT step S forward S backward S clip S adamw S core NAME` (median seconds; the kernel set
OpenBLAS chose) on stdout.
Run with /usr/bin/python3 (Debian's python3-torch)."""
import argparse
import ctypes
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from merak_ref import models  # noqa: E402


def loaded_blas():
    """The BLAS shared objects mapped into this process (torch's BLAS_INFO only says 'generic':
    Debian links libblas.so.3, which the alternatives system points at a provider)."""
    libs = set()
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            if "blas" in os.path.basename(path) or "mkl" in os.path.basename(path):
                libs.add(os.path.realpath(path))
    return sorted(libs)


def openblas_core():
    """The kernel set OpenBLAS picked (it falls back to "Prescott" on CPUs it does not know;
    OPENBLAS_CORETYPE overrides)."""
    for lib in loaded_blas():
        if "openblas" in os.path.basename(lib):
            try:
                f = ctypes.CDLL(lib).openblas_get_corename
                f.restype = ctypes.c_char_p
                return f().decode()
            except (OSError, AttributeError):
                pass
    return "n/a"


def main():
    ap = argparse.ArgumentParser()
    for name, default in [("threads", 2), ("batch", 4), ("seq", 64), ("warmup", 2), ("steps", 5),
                          ("layers", 4), ("hidden", 256), ("heads", 4), ("vocab", 8192),
                          ("max-seq", 64)]:
        ap.add_argument(f"--{name}", type=int, default=default)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)

    model = models.init_gpt2(models.Gpt(a.layers, a.hidden, a.heads, a.max_seq, a.vocab))
    opt = torch.optim.AdamW(models.decay_groups(model, 0.1), lr=3e-4, betas=(0.9, 0.95),
                            eps=1e-8)
    tokens = torch.randint(0, a.vocab, (a.batch, a.seq))
    targets = torch.randint(0, a.vocab, (a.batch, a.seq))
    print(f"  torch {torch.__version__}, {torch.get_num_threads()} threads, BLAS loaded: "
          f"{', '.join(loaded_blas()) or 'none found'}; OpenBLAS core {openblas_core()}",
          file=sys.stderr)

    step, fwd, bwd, clip, adamw = [], [], [], [], []
    for i in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model.loss(tokens, targets)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        t3 = time.perf_counter()
        opt.step()
        t4 = time.perf_counter()
        print(f"  torch L{a.layers} C{a.hidden} step {i}: {1e3 * (t4 - t0):.1f} ms "
              f"(loss {loss.item():.4f})", file=sys.stderr)
        if i >= a.warmup:
            step.append(t4 - t0)
            fwd.append(t1 - t0)
            bwd.append(t2 - t1)
            clip.append(t3 - t2)
            adamw.append(t4 - t3)
    m = statistics.median
    print(f"RESULT step {m(step):.6f} forward {m(fwd):.6f} backward {m(bwd):.6f} "
          f"clip {m(clip):.6f} adamw {m(adamw):.6f} core {openblas_core().replace(' ', '_')}")


if __name__ == "__main__":
    main()
