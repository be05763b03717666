#!/usr/bin/env python3
"""Holds libnccl.so.2 (collie's NCCL layer, src/capi/nccl/) to nccl.h.

Every function that nccl.h declares (any return type: ncclResult_t, const char*, void, ...) must be exported from
the library (nm -D --defined-only) or listed in unsupported.txt with a reason; unsupported.txt must name only
functions of nccl.h, each once and each with a reason, and the library must export nothing but nccl*/pnccl*
symbols. Exits 1, naming every problem, when any of that is not so.

    check_exports.py --header nccl.h --library libnccl.so.2 --unsupported unsupported.txt [--nm nm]
    check_exports.py --self-test --header nccl.h --library libnccl.so.2 --unsupported unsupported.txt [--nm nm]

--self-test checks the checker: it must pass on the real inputs, and must fail (with the expected message) for a
header that declares one more function, for an unsupported.txt entry without a reason, and for an entry that names
no function of the header.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

# A declaration: a return type (words, optional '*'s, qualifiers, attributes on the lines before are not part of
# it), then a name starting with nccl or pnccl, then '('. Matched on the header with comments and preprocessor lines
# removed, so macros such as NCCL_VERSION(X,Y,Z) are not taken for functions.
DECL = re.compile(r"(?:^|[;}\s])(?:const\s+)?[A-Za-z_][A-Za-z0-9_]*(?:\s*\*)*\s+\**\s*(p?nccl[A-Za-z0-9_]*)\s*\(",
                  re.MULTILINE)


def strip_comments_and_preprocessor(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.DOTALL)
    text = re.sub(r"//[^\n]*", " ", text)
    lines = []
    continued = False
    for line in text.split("\n"):
        is_pp = continued or line.lstrip().startswith("#")
        continued = is_pp and line.rstrip().endswith("\\")
        lines.append("" if is_pp else line)
    return "\n".join(lines)


def declared_functions(header_paths):
    names = set()
    for path in header_paths:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = strip_comments_and_preprocessor(f.read())
        # __attribute__ ((deprecated("..."))) before a declaration: drop it so that it cannot hide the return type.
        text = re.sub(r"__attribute__\s*\(\((?:[^()]|\([^()]*\))*\)\)", " ", text)
        names.update(m.group(1) for m in DECL.finditer(text))
    return names


def exported_symbols(nm, library):
    out = subprocess.run([nm, "-D", "--defined-only", library], check=True, capture_output=True, text=True).stdout
    symbols = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3:
            symbols[parts[2]] = parts[1]
        elif len(parts) == 2:
            symbols[parts[1]] = parts[0]
    return symbols


def read_unsupported(path):
    """Returns ({name: reason}, [problems]) from unsupported.txt: '# comments', blank lines, 'name  reason'."""
    entries, problems = {}, []
    with open(path, encoding="utf-8") as f:
        for number, raw in enumerate(f, 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(None, 1)
            name = parts[0]
            reason = parts[1].strip() if len(parts) > 1 else ""
            if name in entries:
                problems.append(f"{path}:{number}: {name} is listed twice")
            if len(reason) < 10:
                problems.append(f"{path}:{number}: {name} is listed without a reason")
            entries[name] = reason
    return entries, problems


def check(headers, library, unsupported_path, nm):
    """Returns the list of problems (empty: all good) and a summary line."""
    declared = declared_functions(headers)
    exported = exported_symbols(nm, library)
    unsupported, problems = read_unsupported(unsupported_path)
    if not declared:
        problems.append(f"no function declarations found in {', '.join(headers)}")
    for name in sorted(declared):
        base = name[1:] if name.startswith("pnccl") else name
        if name in exported:
            if exported[name] not in ("T", "W", "i"):
                problems.append(f"{name} is exported as symbol type {exported[name]}, not a function")
            continue
        if base in unsupported:
            continue
        problems.append(f"{name} is declared in nccl.h but neither exported from {os.path.basename(library)} "
                        f"nor listed in {os.path.basename(unsupported_path)}")
    for name in sorted(unsupported):
        if name not in declared:
            problems.append(f"{os.path.basename(unsupported_path)} lists {name}, which nccl.h does not declare")
    for name in sorted(exported):
        if not (name.startswith("nccl") or name.startswith("pnccl")):
            problems.append(f"{os.path.basename(library)} exports {name}, which is not an nccl*/pnccl* symbol")
    exported_declared = sum(1 for n in declared if n in exported)
    summary = (f"{len(declared)} functions declared in nccl.h, {exported_declared} exported, "
               f"{len(unsupported)} listed as unsupported (each exported too: "
               f"{sum(1 for n in unsupported if n in exported)})")
    return problems, summary


def self_test(header, library, unsupported_path, nm):
    failures = []
    problems, _ = check([header], library, unsupported_path, nm)
    if problems:
        failures.append("the real inputs do not pass: " + "; ".join(problems))
    with tempfile.TemporaryDirectory() as tmp:
        extra = os.path.join(tmp, "extra.h")
        with open(extra, "w") as f:
            f.write("/* one more function */\nncclResult_t  ncclNotInCollie(ncclComm_t comm,\n    int x);\n"
                    "const char* pncclAlsoMissing(void);\n")
        problems, _ = check([header, extra], library, unsupported_path, nm)
        for name in ("ncclNotInCollie", "pncclAlsoMissing"):
            if not any(name in p and "neither exported" in p for p in problems):
                failures.append(f"a declared function missing from the library ({name}) was not reported")
        no_reason = os.path.join(tmp, "no_reason.txt")
        with open(unsupported_path) as src, open(no_reason, "w") as f:
            f.write(src.read() + "ncclCommRevoke\n")
        problems, _ = check([header], library, no_reason, nm)
        if not any("without a reason" in p for p in problems):
            failures.append("an unsupported.txt entry without a reason was not reported")
        stale = os.path.join(tmp, "stale.txt")
        with open(unsupported_path) as src, open(stale, "w") as f:
            f.write(src.read() + "ncclGone   removed from nccl.h long ago\n")
        problems, _ = check([header], library, stale, nm)
        if not any("ncclGone" in p for p in problems):
            failures.append("an unsupported.txt entry naming no function of nccl.h was not reported")
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--header", required=True)
    parser.add_argument("--library", required=True)
    parser.add_argument("--unsupported", required=True)
    parser.add_argument("--nm", default="nm")
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        failures = self_test(args.header, args.library, args.unsupported, args.nm)
        for f in failures:
            print("SELF-TEST FAILED: " + f)
        if not failures:
            print("self-test passed: the checker accepts the real inputs and reports a missing function, an entry "
                  "without a reason and a stale entry")
        return 1 if failures else 0
    problems, summary = check([args.header], args.library, args.unsupported, args.nm)
    print(summary)
    for p in problems:
        print("ERROR: " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
