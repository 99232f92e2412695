#!/usr/bin/env python3
"""The layer order of docs/architecture.md, checked on the sources.

Every file of tidal/ belongs to a layer; an #include may point to the same layer or a lower one,
never a higher one, except the pairs listed in EXCEPTIONS (each with its reason). Layer 1, the core,
has sub-layers of its own (CORE_SUBLAYERS), ordered the same way. Prints every include that runs
against the order and exits 1 when there is one.
"""
import os
import re
import sys

# Lower number = lower layer. A file's layer is its folder under tidal/ ("core" for tidal/*.h|cpp).
LAYERS = {
    "base": 0,
    "core": 1, "seam": 1, "backend": 1,
    "autograd": 2, "data": 2, "io": 2, "dist": 2,
    "ops": 3,
    "nn": 4, "optim": 4,
    "models": 5,
    "parallel": 6,
    "memory": 7, "checkpoint": 7,
    "profile": 8,
    "train": 9,
    "plan": 10,
}

# Layer 1 bottom up: a core file (tidal/NAME.h|cpp) by its NAME, the seam and the backends by their
# folder. A core file missing here is an error: say where a new one goes.
CORE_SUBLAYERS = [
    ("core values", ["device", "dtype", "dtype_dispatch", "shape", "memory_stats", "per_device", "rng"]),
    ("core context", ["memory_context", "range_recorder", "memory_scope"]),
    ("seam", "seam"),
    ("core objects", ["block_pool", "block_segments", "allocator_streams", "allocator", "storage", "tensor", "event", "stream"]),
    ("backends", "backend"),
]

# (from, to): why the include is allowed to point up. Either a pair of layers (any include between
# them) or, narrower, a pair of files.
EXCEPTIONS = {
    ("tidal/tensor.cpp", "tidal/autograd/grad_mode.h"):
        "Tensor carries its autograd metadata: its in-place methods refuse a tensor that requires grad "
        "while grad mode is on",
    ("tidal/tensor.cpp", "tidal/autograd/node.h"):
        "Tensor carries its autograd metadata: str() names its grad_fn, retain_grad() registers with it",
}

# Files whose layer is not their folder's: NCCL's dist::Communicator is dist's (it implements dist's
# interface and registers with dist's factory) but needs CUDA, so it is built with the CUDA backend,
# in its folder; it may include dist/ and, below it, the backend's own headers.
FILE_LAYERS = {
    "tidal/backend/cuda/nccl_communicator.h": "dist",
    "tidal/backend/cuda/nccl_communicator.cpp": "dist",
}


def layer_of(path):
    if path in FILE_LAYERS:
        return FILE_LAYERS[path]
    parts = path.split("/")
    if len(parts) == 2:
        return "core"
    return parts[1]


def rank_of(path):
    """(layer, sub-layer) of a file under tidal/, compared as a pair."""
    layer = layer_of(path)
    if LAYERS[layer] != LAYERS["core"]:
        return (LAYERS[layer], 0), layer
    parts = path.split("/")
    key = parts[1] if len(parts) > 2 else os.path.splitext(parts[1])[0]
    for i, (name, members) in enumerate(CORE_SUBLAYERS):
        if key == members or (isinstance(members, list) and key in members):
            return (LAYERS[layer], i), name
    raise SystemExit(f"{path}: a core file in no sub-layer; add it to CORE_SUBLAYERS in {__file__}")


def main(root):
    os.chdir(root)
    bad, allowed = [], []
    for folder, _, files in os.walk("tidal"):
        for name in sorted(files):
            if not name.endswith((".h", ".cpp", ".cu", ".cuh")):
                continue
            path = os.path.join(folder, name)
            src_rank, src = rank_of(path)
            with open(path, encoding="utf-8") as f:
                for lineno, line in enumerate(f, 1):
                    m = re.match(r'\s*#\s*include\s+"(tidal/[^"]+)"', line)
                    if not m:
                        continue
                    dst_rank, dst = rank_of(m.group(1))
                    if dst_rank <= src_rank:
                        continue
                    if (layer_of(path), layer_of(m.group(1))) in EXCEPTIONS or (path, m.group(1)) in EXCEPTIONS:
                        allowed.append(f"{path} -> {m.group(1)}")
                    else:
                        bad.append(f"{path}:{lineno}: {src} includes {dst} ({m.group(1)})")
    if bad:
        print("includes against the layer order (docs/architecture.md):")
        print("\n".join(bad))
        return 1
    print(f"layers: no include against the layer order; {len(allowed)} named exceptions: {', '.join(allowed)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")))
