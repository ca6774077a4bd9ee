#!/usr/bin/env python3
"""Checks that the source tree keeps its layers (docs/architecture.md, "Layers").

From the bottom: device/ (the device prelude), include/ccc/ (the public API), compiler/,
runtime/, nccl/ (libccc-nccl, NCCL's API over the runtime), then the tools over them (cli/, python/, tools/, bench/, tests/). A file may include
headers of its own layer and of the layers below, never one above; no two headers include each
other; and a public header includes only public headers, so that what `cmake --install` ships
compiles alone. Prints each violation and exits 1 if there is one.
"""
import pathlib
import re
import sys

LAYERS = ["device", "include/ccc", "compiler/src", "runtime/src", "nccl"]  # bottom to top
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def layer_of(path, root):
    rel = path.relative_to(root).as_posix()
    for i, layer in enumerate(LAYERS):
        if rel.startswith(layer + "/"):
            return i
    return len(LAYERS)  # a tool over every layer


def main(root):
    root = pathlib.Path(root).resolve()
    headers = {}  # the name a file includes it by -> path
    for i, layer in enumerate(LAYERS):
        for h in (root / layer).glob("*.h"):
            headers["ccc/" + h.name if layer == "include/ccc" else h.name] = h
    sources = [p for layer in LAYERS + ["cli", "python/src", "tools", "bench", "tests/unit"]
               for p in (root / layer).glob("*") if p.suffix in (".h", ".cpp")]
    includes = {}
    errors = []
    for src in sources:
        names = INCLUDE.findall(src.read_text(errors="replace"))
        includes[src] = [headers[n] for n in names if n in headers]
        errors += [f"{src.relative_to(root)} includes {n}, which is not a public header (include/ccc)"
                   for n in names if n.startswith("ccc/") and n not in headers]
        for h in includes[src]:
            if layer_of(h, root) > layer_of(src, root):
                errors.append(f"{src.relative_to(root)} includes {h.relative_to(root)}, a layer above it")
    for src, targets in includes.items():
        for h in targets:
            if src.suffix == ".h" and src in includes.get(h, []) and str(src) < str(h):
                errors.append(f"{src.relative_to(root)} and {h.relative_to(root)} include each other")
    for e in errors:
        print(e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent))
