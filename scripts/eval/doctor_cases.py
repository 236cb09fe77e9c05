#!/usr/bin/env python3
"""Rebuilds the labelled runs' logs (eval/doctor-real/cases/<id>/case.json) from their provenance:
each file's bytes taken from a bare git mirror of its repository (`git show <commit>:<path>`, else
its blob), checked against the manifest's sha256, written under OUT/<id>/ with the case.json.

    scripts/eval/doctor_cases.py --mirrors /work/.mirror --out /tmp/doctor-cases [--missing-only]

A mirror is looked for at MIRRORS/<owner>+<name>[/*]; the cases whose repository has none, or
whose bytes do not match, are listed at the end (fetch those repositories, then run it again).
Score the doctor on the result with CONTRAI_DOCTOR_CORPUS=OUT (eval/doctor-real/README.md)."""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys

CASES = os.path.join(os.path.dirname(__file__), "..", "..", "eval", "doctor-real", "cases")


def mirror(root: str, repo: str) -> str | None:
    """The bare git directory of ``repo`` under ``root``, if fetched."""
    owner, name = repo.split("/")
    for d in glob.glob(f"{root}/{owner}+{name}") + glob.glob(f"{root}/{owner}+{name}/*"):
        if os.path.isfile(os.path.join(d, "HEAD")):
            return d
    return None


def blob(gitdir: str, commit: str, f: dict[str, str]) -> bytes | None:
    """A file's bytes from the mirror, by path at the commit or by blob, when they match."""
    for args in (["show", f"{commit}:{f['path']}"], ["cat-file", "blob", f.get("git_blob") or "0" * 40]):
        r = subprocess.run(["git", "--git-dir", gitdir, *args], capture_output=True)
        if r.returncode == 0 and hashlib.sha256(r.stdout).hexdigest() == f["sha256"]:
            return r.stdout
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mirrors", required=True, help="the folder holding the fetched mirrors")
    ap.add_argument("--out", required=True, help="where the cases are written")
    ap.add_argument("--missing-only", action="store_true", help="skip cases ../shared already holds")
    a = ap.parse_args()
    shared = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "eval", "doctor-real", "cases")
    done, absent = 0, []
    for path in sorted(glob.glob(os.path.join(CASES, "*", "case.json"))):
        case = json.load(open(path))
        cid = case["id"]
        if a.missing_only and os.path.isdir(os.path.join(shared, cid)):
            continue
        out = os.path.join(a.out, cid)
        if all(os.path.isfile(os.path.join(out, f["path"])) for f in case["files"]):
            done += 1
            continue
        gitdir = mirror(a.mirrors, case["source"]["repo"])
        missing = [f["path"] for f in case["files"]] if gitdir is None else []
        for f in case["files"] if gitdir else []:
            data = blob(gitdir, case["source"]["commit"], f)
            if data is None:
                missing.append(f["path"])
                continue
            os.makedirs(os.path.dirname(os.path.join(out, f["path"])), exist_ok=True)
            with open(os.path.join(out, f["path"]), "wb") as w:
                w.write(data)
        if missing:
            absent.append(f"{cid}: {case['source']['repo']}@{case['source']['commit'][:12]} "
                          f"{'not fetched' if gitdir is None else 'bytes not found: ' + ', '.join(missing)}")
            continue
        shutil.copy(path, os.path.join(out, "case.json"))
        done += 1
    print(f"{done} cases under {a.out}; {len(absent)} not rebuilt")
    for line in absent:
        print(f"  {line}")
    return 1 if absent else 0


if __name__ == "__main__":
    sys.exit(main())
