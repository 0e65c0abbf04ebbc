"""PyTorch side of the parity test: loads what tests/parity/parity_dump wrote (config, initial
weights, batch, loss, gradients, per-step losses and gradient norms, weights after the AdamW
steps), recomputes all of it with plain PyTorch (python/merak_ref) and torch.optim.AdamW, and
fails when any of it differs by more than the tolerance.

Usage: /usr/bin/python3 tests/parity/compare.py DIR [gpt bert ...]
"""
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from merak_ref import models, st_io  # noqa: E402

RTOL = 1e-4     # per tensor: max|a - b| <= RTOL * max|b| + ATOL
ATOL = 1e-10    # lets an all-zero reference match an all-zero result


def rel_diff(ours, ref):
    """max|a - b| / max|b| (the absolute difference when the reference is all zeros)."""
    ours = np.asarray(ours, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if ours.shape != ref.shape:
        return float("inf")
    err = float(np.max(np.abs(ours - ref))) if ref.size else 0.0
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    return err / scale if scale > 0 else err


def within(ours, ref):
    ours = np.asarray(ours, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if ours.shape != ref.shape or not np.all(np.isfinite(ours)):
        return False
    return float(np.max(np.abs(ours - ref))) <= RTOL * float(np.max(np.abs(ref))) + ATOL


class Report:
    def __init__(self, model):
        self.model, self.failures = model, []
        self.worst = {}  # category -> (rel, name)

    def check(self, category, name, ours, ref):
        r = rel_diff(ours, ref)
        if category not in self.worst or r > self.worst[category][0]:
            self.worst[category] = (r, name)
        if not within(ours, ref):
            self.failures.append(f"{category} '{name}': relative difference {r:.3g} > {RTOL:g}")

    def fail(self, message):
        self.failures.append(message)


def build(config):
    m = config["model"]
    if config["family"] == "gpt":
        return models.Gpt(m["layers"], m["hidden"], m["heads"], m["max_seq"], m["vocab"],
                          m.get("ffn_hidden", 0), m["ln_eps"])
    return models.Bert(m["layers"], m["hidden"], m["heads"], m["max_seq"], m["vocab"],
                       m["type_vocab"], m.get("ffn_hidden", 0), m["ln_eps"])


def loss_fn(family, model, batch):
    t = {k: torch.from_numpy(v) for k, v in batch.items()}
    if family == "gpt":
        return model.loss(t["tokens"], t["targets"])
    return model.loss(t["tokens"], t["segment_ids"], t["attention_mask"].bool(),
                      t["mlm_targets"], t["nsp_labels"])


def run(directory, family):
    path = lambda what: os.path.join(directory, f"{family}_{what}")
    with open(path("config.json")) as f:
        config = json.load(f)
    init = st_io.load(path("init.safetensors"))
    batch = st_io.load(path("batch.safetensors"))
    grads = st_io.load(path("grads.safetensors"))
    after = st_io.load(path("after.safetensors"))
    report = Report(family)

    torch.manual_seed(0)
    model = build(config)
    named = dict(model.named_parameters())
    if set(named) != set(init):
        report.fail(f"parameter names differ: only in merak {sorted(set(init) - set(named))}, "
                    f"only in the reference {sorted(set(named) - set(init))}")
        return report
    with torch.no_grad():
        for name, p in named.items():
            if tuple(p.shape) != init[name].shape:
                report.fail(f"parameter '{name}': merak shape {init[name].shape}, "
                            f"reference {tuple(p.shape)}")
                return report
            p.copy_(torch.from_numpy(init[name]))

    o = config["optim"]
    opt = torch.optim.AdamW(models.decay_groups(model, o["weight_decay"]), lr=o["lr"],
                            betas=(o["beta1"], o["beta2"]), eps=o["eps"])
    steps = o["steps"]
    clipped = 0
    for step in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(family, model, batch)
        loss.backward()
        report.check("step loss", f"step {step + 1}", after["step_losses"][step], loss.item())
        if step == 0:
            report.check("loss", "loss", grads["loss"], loss.item())
            for name, p in named.items():
                report.check("gradient", name, grads[name], p.grad.numpy())
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), o["clip"]).item()
        report.check("grad norm", f"step {step + 1}", after["grad_norms"][step], norm)
        clipped += norm > o["clip"]
        lr = models.scheduled_lr(step, o["total_steps"], o["lr"], o["warmup_steps"], o["decay"],
                                 o["min_lr"])
        report.check("lr", f"step {step + 1}", after["lrs"][step], lr)
        for group in opt.param_groups:
            group["lr"] = lr
        opt.step()
    if clipped != steps:
        report.fail(f"clipping at {o['clip']} acted in {clipped} of {steps} steps; the test "
                    "must exercise it in every step (lower optim.clip)")
    for name, p in named.items():
        report.check("parameter after steps", name, after[name], p.detach().numpy())
    moved = max(rel_diff(after[n], init[n]) for n in named)
    if moved < 10 * RTOL:
        report.fail(f"parameters moved by at most {moved:.3g} (relative): too little for the "
                    "post-step comparison to mean anything")
    return report


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: compare.py DIR [gpt bert ...]")
    directory, families = sys.argv[1], sys.argv[2:] or ["gpt", "bert"]
    torch.set_num_threads(1)
    failed = False
    for family in families:
        report = run(directory, family)
        print(f"[{family}] largest relative differences (tolerance {RTOL:g}):")
        for category in ("loss", "gradient", "step loss", "grad norm", "lr",
                         "parameter after steps"):
            if category in report.worst:
                r, name = report.worst[category]
                print(f"  {category:22s} {r:.3e}  ({name})")
        for f in report.failures:
            print(f"  FAIL {f}")
        failed |= bool(report.failures)
        print(f"[{family}] {'FAILED' if report.failures else 'passed'}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
