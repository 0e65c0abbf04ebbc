"""cuda_library: .cu files compiled by nvcc (a genrule per file), linked like any cc_library.

The .cu files should include only CUDA and standard headers plus small launcher headers of
plain C++ types: nvcc then never parses the project's heavier headers, and the code that talks
to the op registry stays in ordinary .cc files compiled by gcc.
"""

NVCC = "/usr/local/cuda/bin/nvcc"

# A100 (sm_80) and H100/H200 (sm_90), each as native code.
GENCODE = "-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90"

def cuda_library(name, srcs, hdrs = [], deps = [], **kwargs):
    objs = []
    for src in srcs:
        stem = src.replace("/", "_").replace(".cu", "")
        obj = "_%s_%s.pic.o" % (name, stem)
        native.genrule(
            name = "_%s_%s_nvcc" % (name, stem),
            srcs = [src] + hdrs,
            outs = [obj],
            cmd = " ".join([
                NVCC,
                "-c -O3 -std=c++20 --expt-relaxed-constexpr",
                "-Xcompiler -fPIC,-O3",
                GENCODE,
                "-I.",
                "$(location %s)" % src,
                "-o $@",
            ]),
            message = "nvcc %s" % src,
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = deps + ["@cuda//:cudart"],
        **kwargs
    )
