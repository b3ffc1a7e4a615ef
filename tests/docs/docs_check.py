#!/usr/bin/env python3
"""The documentation, checked as a reader would use it (run by `make test`).

  docs_check.py links REPO
      Every relative link of every Markdown file of the repository (README.md, docs/, the folder
      READMEs) names a file or directory that exists, and every #anchor a heading of the target
      (GitHub's slugs). Absolute URLs are not fetched.
  docs_check.py reference REPO SIFT
      docs/reference/cli.md and docs/reference/job-spec.md are what `sift help-markdown` (and
      `--job-spec`) print now: `make docs` regenerates them.
  docs_check.py commands REPO SIFT FILE [--list] [--fixtures DIR]
      Every ```sh block of FILE runs, in order, in one `bash -e` session in an empty temporary
      directory, with SIFT's directory first on PATH and $SIFT_REPO the repository. With
      --fixtures, DIR's files and folders are copied into that directory first (a page whose
      commands read files the reader has: tests/docs/fixtures/<page>/). A block whose
      info string says `needs-checkout` (make targets, run from a clone), `needs-gpu` or
      `needs-cluster` is not run; any other word after `sh` is an error, as is a file without a
      runnable block.
Exit 0 when everything holds; 1 with one line per problem (file:line: what) otherwise.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

SKIP_DIRS = {".git", "build", ".venv", "out", "node_modules"}
MARKERS = {"needs-checkout", "needs-gpu", "needs-cluster"}


def markdown_files(repo):
    for root, dirs, files in os.walk(repo):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("build"))
        for f in sorted(files):
            if f.endswith(".md"):
                yield os.path.join(root, f)


def slug(heading):
    """GitHub's anchor of a heading: lower case, punctuation but '-' and '_' dropped, spaces to
    '-'."""
    text = re.sub(r"`|\*\*|\*", "", heading.strip())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links: their text
    text = text.lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def strip_code(lines):
    """(line number, text) of the lines outside fenced code blocks."""
    fence = None
    for n, line in enumerate(lines, 1):
        m = re.match(r"^\s*(```+|~~~+)", line)
        if m:
            if fence is None:
                fence = m.group(1)[:3]
            elif line.strip().startswith(fence):
                fence = None
            continue
        if fence is None:
            yield n, line


def anchors_of(path, cache={}):
    if path not in cache:
        seen = {}
        out = set()
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
        for _, line in strip_code(lines):
            m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
            if not m:
                continue
            s = slug(m.group(2))
            k = seen.get(s, 0)
            seen[s] = k + 1
            out.add(s if k == 0 else f"{s}-{k}")
        for m in re.finditer(r'<a\s+(?:name|id)="([^"]+)"', "\n".join(lines)):
            out.add(m.group(1))
        cache[path] = out
    return cache[path]


LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\(([^)\s]+)\)")


def check_links(repo):
    problems = []
    for path in markdown_files(repo):
        rel = os.path.relpath(path, repo)
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
        for n, line in strip_code(lines):
            line = re.sub(r"`[^`]*`", "", line)  # inline code is not a link
            for m in LINK.finditer(line):
                target = m.group(1) or m.group(2)
                if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("//"):
                    continue  # http:, https:, mailto:
                file_part, _, anchor = target.partition("#")
                dest = path if not file_part else os.path.normpath(
                    os.path.join(os.path.dirname(path), file_part))
                if not os.path.exists(dest):
                    problems.append(f"{rel}:{n}: link {target}: {file_part} does not exist")
                    continue
                if anchor and dest.endswith(".md") and anchor not in anchors_of(dest):
                    problems.append(f"{rel}:{n}: link {target}: no heading #{anchor} in "
                                    f"{os.path.relpath(dest, repo)}")
    return problems


def check_reference(repo, sift):
    problems = []
    for args, page in ((["help-markdown"], "docs/reference/cli.md"),
                       (["help-markdown", "--job-spec"], "docs/reference/job-spec.md")):
        want = subprocess.run([sift] + args, capture_output=True, text=True, check=False)
        if want.returncode != 0:
            problems.append(f"{page}: sift {' '.join(args)} exited {want.returncode}: "
                            f"{want.stderr.strip()}")
            continue
        path = os.path.join(repo, page)
        have = open(path, encoding="utf-8").read() if os.path.exists(path) else None
        if have != want.stdout:
            where = "missing" if have is None else "out of date"
            first = ""
            if have is not None:
                for n, (a, b) in enumerate(zip(have.splitlines(), want.stdout.splitlines()), 1):
                    if a != b:
                        first = f" (first difference at line {n}: {b!r})"
                        break
            problems.append(f"{page}: {where}{first}: run `make docs`")
    return problems


def sh_blocks(path):
    """(line, info words, text) of every ```sh block."""
    blocks = []
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^```(\S*)\s*(.*)$", lines[i])
        if not m:
            i += 1
            continue
        lang, rest = m.group(1), m.group(2).split()
        start = i + 1
        i += 1
        body = []
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        i += 1
        if lang == "sh":
            blocks.append((start, rest, "\n".join(body)))
    return blocks


def check_commands(repo, sift, page, list_only=False, fixtures=None):
    path = os.path.join(repo, page)
    problems = []
    if fixtures is not None and not os.path.isdir(fixtures):
        return [f"{page}: --fixtures {fixtures}: not a directory"]
    runnable = []
    for line, words, text in sh_blocks(path):
        unknown = [w for w in words if w not in MARKERS]
        if unknown:
            problems.append(f"{page}:{line}: ```sh {' '.join(words)}: unknown marker(s) "
                            f"{unknown} (known: {sorted(MARKERS)})")
        elif not words:
            runnable.append((line, text))
    if problems:
        return problems
    if not runnable:
        return [f"{page}: no runnable ```sh block"]
    script = ["set -euo pipefail"]
    for line, text in runnable:
        script.append(f"echo '+++ {page}:{line}' >&2")
        script.append(text)
    if list_only:
        print("\n".join(script))
        return []
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(os.path.abspath(sift)) + os.pathsep + env.get("PATH", "")
    env["SIFT_REPO"] = repo
    for var in ("SIFT_COORDINATOR", "SIFT_TLS_DIR", "SIFT_TOKEN_FILE"):
        env.pop(var, None)
    with tempfile.TemporaryDirectory(prefix="sift-docs-") as tmp:
        if fixtures is not None:
            shutil.copytree(fixtures, tmp, dirs_exist_ok=True)
        r = subprocess.run(["bash", "-c", "\n".join(script)], cwd=tmp, env=env,
                           capture_output=True, text=True, check=False)
    if r.returncode != 0:
        marks = re.findall(r"^\+\+\+ (\S+)$", r.stderr, re.M)
        where = marks[-1] if marks else page
        tail = "\n".join((r.stdout + r.stderr).strip().splitlines()[-25:])
        problems.append(f"{where}: the block exited {r.returncode}:\n{tail}")
    else:
        print(f"{page}: {len(runnable)} block(s) ran")
    return problems


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    mode, repo = argv[1], os.path.abspath(argv[2])
    if mode == "links" and len(argv) == 3:
        problems = check_links(repo)
    elif mode == "reference" and len(argv) == 4:
        problems = check_reference(repo, argv[3])
    elif mode == "commands" and len(argv) >= 5:
        opts, list_only, fixtures = argv[5:], False, None
        while opts:
            if opts[0] == "--list":
                list_only, opts = True, opts[1:]
            elif opts[0] == "--fixtures" and len(opts) >= 2:
                fixtures, opts = os.path.abspath(opts[1]), opts[2:]
            else:
                print(__doc__, file=sys.stderr)
                return 2
        problems = check_commands(repo, argv[3], argv[4], list_only=list_only, fixtures=fixtures)
    else:
        print(__doc__, file=sys.stderr)
        return 2
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
