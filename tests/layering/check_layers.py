#!/usr/bin/env python3
"""Layering check: every #include "dir/..." in src/ must point at the same layer or one below it.

The layers, bottom to top (ARCHITECTURE.md tells why):
  base                       errors, log, params, poller, sockets, topology, datatypes + host reduction
  transport, algorithms      each on base only (they never include each other)
  core                       the communicator: setup, planner, executor, progress queue, device stager
  sim, capi, ddp, torch, cuda   on top: the simulator, the C APIs, DDP, the torch backend, the CUDA plugin
The public headers (include/collie/) include no internal header at all. No file in src/ is over 600 lines.
Exit status 1 with one line per violation; 0 and a one-line summary when clean.
"""
import pathlib
import re
import sys

ALLOWED = {
    "base": {"base"},
    "transport": {"base", "transport"},
    "algorithms": {"base", "algorithms"},
    "core": {"base", "transport", "algorithms", "core"},
    "sim": {"base", "transport", "algorithms", "core", "sim"},
    "capi": {"base", "transport", "algorithms", "core", "capi"},
    "ddp": {"base", "core", "ddp"},
    "torch": {"base", "core", "ddp", "torch"},
    "cuda": {"base", "core", "cuda"},  # the plugin implements the table core/cuda_plugin.hpp declares
}
MAX_LINES = 600
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[2])
    src = root / "src"
    problems = []
    files = 0
    for path in sorted(src.rglob("*")):
        if path.suffix not in {".hpp", ".h", ".cpp", ".cu", ".cuh"}:
            continue
        files += 1
        rel = path.relative_to(src)
        layer = rel.parts[0]
        text = path.read_text(errors="replace")
        lines = text.count("\n")
        if lines > MAX_LINES:
            problems.append(f"src/{rel}: {lines} lines (the limit is {MAX_LINES}): split it by responsibility")
        if layer not in ALLOWED:
            problems.append(f"src/{rel}: folder '{layer}' has no layer in tests/layering/check_layers.py")
            continue
        for m in INCLUDE.finditer(text):
            target = m.group(1).split("/")[0]
            if "/" not in m.group(1) or target not in ALLOWED:
                continue  # same-folder or generated header (collie/config.h is public)
            if target not in ALLOWED[layer]:
                line = text.count("\n", 0, m.start()) + 1
                problems.append(f"src/{rel}:{line}: layer '{layer}' includes \"{m.group(1)}\" from layer '{target}'")
    for path in sorted((root / "include" / "collie").glob("*")):
        text = path.read_text(errors="replace")
        for m in INCLUDE.finditer(text):
            if m.group(1).split("/")[0] in ALLOWED:
                line = text.count("\n", 0, m.start()) + 1
                problems.append(f"include/collie/{path.name}:{line}: a public header includes internal \"{m.group(1)}\"")
    for p in problems:
        print(p)
    print(f"layering: {files} files in src/, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
