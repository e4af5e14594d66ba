#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Records the golden export hashes of tests/quant/export_golden_test.cpp.

Usage: tools/export_golden_hashes.py MOEWB_CLI OUT.json

Runs each export below with the given `moewb` build and writes, per run, the FNV-1a 64-bit fingerprint of
every file it wrote (manifest.json with its "source" path blanked). Run it with the build whose exports
are the reference, before a change that must not alter them.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

RUNS = {
    "rtn3": "quantize --method rtn --bits 3",
    "hqq3": "quantize --method hqq --bits 3",
    "hqq4g128": "quantize --method hqq --bits 4 --group 128 --only 'model.layers.2.*'",
    "rtn2": "quantize --method rtn --bits 2 --only 'model.layers.3.*'",
    "milo3": "quantize --method milo --bits 3 --policy 'dense-16+sparse-8' --max-iters 5 --only 'model.layers.0.*'",
    "milo3int8": "quantize --method milo --bits 3 --policy uniform-8 --compensator int8 --svd randomized "
                 "--seed 7 --max-iters 3 --only 'model.layers.1.*'",
}


def fingerprint(data: bytes) -> str:
    h = 1469598103934665603
    for b in data:
        h ^= b
        h = (h * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def main() -> None:
    cli, out_json = sys.argv[1], sys.argv[2]
    result = {"runs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name, args in RUNS.items():
            out = os.path.join(tmp, name)
            subprocess.run(f"'{cli}' {args} --out '{out}'", shell=True, check=True, stdout=subprocess.DEVNULL)
            files = {}
            for f in sorted(os.listdir(out)):
                data = open(os.path.join(out, f), "rb").read()
                if f == "manifest.json":
                    data = re.sub(rb'"source": "[^"]*"', b'"source": ""', data, count=1)
                files[f] = fingerprint(data)
            result["runs"][name] = {"args": args, "files": files}
    with open(out_json, "w") as fh:
        json.dump(result, fh, indent=2)
        fh.write("\n")


if __name__ == "__main__":
    main()
