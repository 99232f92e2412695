#!/usr/bin/env python3
"""The layer order of docs/architecture.md, checked on the sources.

Every file of tidal/ belongs to a layer; an #include may point to the same layer or a lower one,
never a higher one, except the pairs listed in EXCEPTIONS (each with its reason). Prints every
include that runs against the order and exits 1 when there is one.
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
    "memory": 6,
    "profile": 7,
    "train": 8,
}

# (from layer, to layer): why the include is allowed to point up.
EXCEPTIONS = {
    ("core", "autograd"): "Tensor carries its autograd metadata: tensor.cpp implements backward(), "
                          "requires_grad_() and the version check with autograd's engine and nodes",
}


def layer_of(path):
    parts = path.split("/")
    if len(parts) == 2:
        return "core"
    return parts[1]


def main(root):
    os.chdir(root)
    bad = []
    for folder, _, files in os.walk("tidal"):
        for name in sorted(files):
            if not name.endswith((".h", ".cpp", ".cu", ".cuh")):
                continue
            path = os.path.join(folder, name)
            src = layer_of(path)
            with open(path, encoding="utf-8") as f:
                for lineno, line in enumerate(f, 1):
                    m = re.match(r'\s*#\s*include\s+"(tidal/[^"]+)"', line)
                    if not m:
                        continue
                    dst = layer_of(m.group(1))
                    if LAYERS[dst] > LAYERS[src] and (src, dst) not in EXCEPTIONS:
                        bad.append(f"{path}:{lineno}: {src} includes {dst} ({m.group(1)})")
    if bad:
        print("includes against the layer order (docs/architecture.md):")
        print("\n".join(bad))
        return 1
    print(f"layers: no include against the layer order ({len(EXCEPTIONS)} named exceptions)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")))
