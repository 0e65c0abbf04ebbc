"""PyTorch's f32 matmul GFLOP/s at the products bench_kernels times, for a side-by-side reading.

The same layers (GPT-2 124M's or, with --shape small, the L4 C256 V8192 model's; 256 tokens),
the same three products a linear layer runs in training (x W^T, dY W, dY^T x, each with its
own transposes) and the 1024 square product, at 1 and 2 threads, median of --runs timed runs
of ~20 ms each. PyTorch runs at its best: each thread count in a child process with OpenBLAS's
own kernel choice for this CPU (OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset), its thread count
set before torch loads (torch.set_num_threads does not reach OpenBLAS's own pthreads) and
OMP_WAIT_POLICY=PASSIVE; --coretype NAME names a kernel set instead (SkylakeX on AVX-512).

  /usr/bin/python3 tools/bench/bench_gemm_torch.py [--shape 124m|small] [--runs 7]
"""
import argparse
import os
import subprocess
import sys
import time

CHILD = "_MERAK_BENCH_GEMM_THREADS"


def layers(shape):
    c, vocab = (256, 8192) if shape == "small" else (768, 50257)
    return [("attn out", c, c), ("qkv", 3 * c, c), ("mlp up", 4 * c, c), ("mlp down", c, 4 * c),
            ("lm head", vocab, c)]


def median_seconds(fn, runs):
    fn()
    start = time.perf_counter()
    fn()
    once = max(1e-7, time.perf_counter() - start)
    reps = max(1, int(0.02 / once))
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        times.append((time.perf_counter() - start) / reps)
    times.sort()
    return times[len(times) // 2]


def child(args, threads):
    import torch  # after the environment is set: OpenBLAS reads it when it loads

    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(1)

    def rand(*shape):
        return torch.rand(*shape, generator=gen) * 2 - 1

    def row(layer, form, fn, m, n, k):
        s = median_seconds(fn, args.runs)
        print(f"  {layer:<9} {form:<7} {m:6d} {n:6d} {k:6d}  {threads:7d}  {2.0 * m * n * k / s / 1e9:9.1f}",
              flush=True)

    tokens = 256
    for name, out, inp in layers(args.shape):
        x, w, dy = rand(tokens, inp), rand(out, inp), rand(tokens, out)
        row(name, "x W^T", lambda: torch.mm(x, w.t()), tokens, out, inp)
        row(name, "dY W", lambda: torch.mm(dy, w), tokens, inp, out)
        row(name, "dY^T x", lambda: torch.mm(dy.t(), x), out, inp, tokens)
    a, b = rand(1024, 1024), rand(1024, 1024)
    row("square", "A B", lambda: torch.mm(a, b), 1024, 1024, 1024)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=["124m", "small"], default="124m")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--coretype", default="", help="OPENBLAS_CORETYPE (default: OpenBLAS's choice)")
    args = parser.parse_args()
    if args.runs < 5:
        parser.error("--runs must be at least 5")
    if CHILD in os.environ:
        child(args, int(os.environ[CHILD]))
        return
    print(f"PyTorch f32 matmul (torch.mm, OpenBLAS kernels: {args.coretype or 'its own choice'};"
          f" median of {args.runs} runs)")
    print(f"  {'layer':<9} {'product':<7} {'M':>6} {'N':>6} {'K':>6}  {'threads':>7}  {'GFLOP/s':>9}",
          flush=True)
    for threads in (1, 2):
        env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
        if args.coretype:
            env["OPENBLAS_CORETYPE"] = args.coretype
        env.update({CHILD: str(threads), "OPENBLAS_NUM_THREADS": str(threads),
                    "OMP_NUM_THREADS": str(threads), "OMP_WAIT_POLICY": "PASSIVE"})
        result = subprocess.run([sys.executable, __file__] + sys.argv[1:], env=env)
        if result.returncode != 0:
            sys.exit(result.returncode)


if __name__ == "__main__":
    main()
