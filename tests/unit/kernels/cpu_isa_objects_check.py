#!/usr/bin/env python3
"""Checks the CPU backend's ISA variant objects (ctest unit_cpu_isa_objects): the one binary must
never run an instruction the CPU lacks, so the wider ISA may appear only in code that exists in
one variant alone.

Each variant (kernels/cpu/cpu_backend_{generic,avx2,avx512}.cc) defines its code in the namespace
sift::kernels::<variant> inside a `#pragma GCC target` region; everything else in the object (the
standard library's templates, inline functions of shared headers) may also be emitted, as a weak
symbol, by the other variants, and the linker keeps one copy for all of them. So in every object:
  - a function whose name is not in the variant's namespace has no VEX/EVEX instruction (no
    mnemonic starting with 'v', no %ymm/%zmm/%k register) — it is baseline x86-64 code;
  - the generic variant has no VEX/EVEX instruction at all, the avx2 variant no EVEX (%zmm, %k,
    or an xmm16-31 / ymm16-31 register);
  - the variant's own namespace does hold vector code of its ISA (the pragma took effect).
Usage: cpu_isa_objects_check.py OBJDUMP OBJECT... (the variant from the file name: cpu_backend_<variant>.*)
"""
import re
import subprocess
import sys

FUNC = re.compile(r"^[0-9a-f]+ <(.*)>:$")
VEX_MNEMONIC = re.compile(r"^\s*[0-9a-f]+:\s+(v[a-z0-9]+)\b")
EVEX_REG = re.compile(r"%(zmm\d+|k[0-7]\b|[xy]mm(1[6-9]|2\d|3[01])\b)")


def functions(objdump, obj):
    out = subprocess.run([objdump, "-d", "-C", "--no-show-raw-insn", obj], capture_output=True,
                         text=True, check=True).stdout
    name, lines = None, []
    for line in out.splitlines():
        m = FUNC.match(line)
        if m:
            if name is not None:
                yield name, lines
            name, lines = m.group(1), []
        elif name is not None and line.strip():
            lines.append(line)
    if name is not None:
        yield name, lines


def main():
    objdump, specs = sys.argv[1], sys.argv[2:]
    problems, checked = [], 0
    for obj in specs:
        m = re.search(r"cpu_backend_(generic|avx2|avx512)\.", obj)
        if not m:
            problems.append(f"{obj}: not a variant object (cpu_backend_<variant>.*)")
            continue
        variant = m.group(1)
        ns = f"sift::kernels::{variant}::"
        own_vector = 0
        for name, lines in functions(objdump, obj):
            checked += 1
            vex = [l for l in lines if VEX_MNEMONIC.match(l)]
            evex = [l for l in lines if EVEX_REG.search(l)]
            mine = ns in name
            if mine:
                if variant == "generic" and vex:
                    problems.append(f"{obj}: {name}: VEX code in the generic variant: {vex[0].strip()}")
                if variant == "avx2" and evex:
                    problems.append(f"{obj}: {name}: AVX-512 code in the avx2 variant: {evex[0].strip()}")
                if any("ymm" in l or "zmm" in l for l in lines):
                    own_vector += 1
            elif vex or evex:
                first = (vex or evex)[0].strip()
                problems.append(f"{obj}: {name}: outside {ns} (may be shared between variants) "
                                f"but holds {first}")
        if variant != "generic" and own_vector == 0:
            problems.append(f"{obj}: no function of {ns} uses wide vectors: the target pragma "
                            f"did not take effect")
        print(f"{variant}: {obj}: {own_vector} functions of {ns} with wide vectors")
    if len(specs) != 3:
        problems.append(f"expected the 3 variant objects, got {len(specs)}")
    for p in problems:
        print("FAIL:", p)
    print(f"{checked} functions checked, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
