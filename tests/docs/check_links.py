#!/usr/bin/env python3
"""Checks that every relative link in tandem's markdown resolves.

Usage: check_links.py ROOT [FILE.md ...]

Scans ROOT/README.md and every ROOT/docs/**/*.md (or the files named) for
markdown links and images, inline ``[text](target)`` / ``![alt](target)``
reference definitions ``[id]: target``, and the src/href of HTML <img>,
<a> and <source> tags, outside fenced code blocks and inline code. Targets with a scheme (http:, https:, mailto:, ...) and pure
``#anchor`` targets are skipped; of the others the ``#fragment`` and
``?query`` are dropped and the path, percent-decoded, must exist relative
to the markdown file's folder (a leading ``/`` means ROOT, as on GitHub).
Prints ``FILE:LINE: broken link 'TARGET' (no PATH)`` for each one that does
not and exits 1; exits 0 when all resolve. Standard library only.
"""

import os
import re
import sys
import urllib.parse

SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
HTML_LINK = re.compile(r"<(?:img|a|source)\b[^>]*?\b(?:src|href|srcset)\s*=\s*[\"']([^\"']+)[\"']", re.I)


def inline_targets(line):
    """The targets of the inline links and images of one line."""
    targets = []
    start = 0
    while True:
        i = line.find("](", start)
        if i < 0:
            return targets
        j = i + 2
        while j < len(line) and line[j] in " \t":
            j += 1
        if j < len(line) and line[j] == "<":  # [text](<path with spaces>)
            end = line.find(">", j + 1)
            if end < 0:
                return targets
            targets.append(line[j + 1:end])
            start = end + 1
            continue
        # Up to the ')' that closes the link (parentheses inside balanced),
        # or the first blank, after which only a "title" may follow.
        depth, k = 0, j
        while k < len(line):
            c = line[k]
            if c == "\\" and k + 1 < len(line):
                k += 2
                continue
            if c == "(":
                depth += 1
            elif c == ")":
                if depth == 0:
                    break
                depth -= 1
            elif c in " \t":
                break
            k += 1
        if k > j:
            targets.append(line[j:k])
        start = k


def links(path):
    """(line number, target) of every link of one markdown file."""
    found = []
    fence = None
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            m = FENCE.match(line)
            if m:
                marker = m.group(1)
                if fence is None:
                    fence = marker
                elif marker[0] == fence[0] and len(marker) >= len(fence):
                    fence = None
                continue
            if fence is not None:
                continue
            line = CODE_SPAN.sub("", line.rstrip("\n"))
            m = REFERENCE.match(line)
            if m:
                found.append((n, m.group(1).strip("<>")))
                continue
            found.extend((n, t) for t in inline_targets(line))
            found.extend((n, t) for t in HTML_LINK.findall(line))
    return found


def broken(root, path):
    """Messages for the links of `path` whose target does not exist."""
    out = []
    for n, target in links(path):
        if not target or target.startswith("#") or SCHEME.match(target):
            continue
        rel = urllib.parse.unquote(target.split("#", 1)[0].split("?", 1)[0])
        if not rel:
            continue
        base = root if rel.startswith("/") else os.path.dirname(path)
        full = os.path.normpath(os.path.join(base, rel.lstrip("/")))
        if not os.path.exists(full):
            shown = os.path.relpath(path, root)
            out.append(f"{shown}:{n}: broken link '{target}' (no {os.path.relpath(full, root)})")
    return out


def markdown_files(root):
    files = []
    readme = os.path.join(root, "README.md")
    if os.path.isfile(readme):
        files.append(readme)
    for folder, dirs, names in os.walk(os.path.join(root, "docs")):
        dirs.sort()
        files.extend(os.path.join(folder, x) for x in sorted(names) if x.endswith(".md"))
    return files


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    root = os.path.abspath(argv[1])
    files = [os.path.abspath(x) for x in argv[2:]] or markdown_files(root)
    if not files:
        print(f"check_links: no README.md and no docs/*.md under {root}", file=sys.stderr)
        return 2
    problems, count = [], 0
    for path in files:
        problems.extend(broken(root, path))
        count += len(links(path))
    for p in problems:
        print(p)
    print(f"check_links: {len(files)} files, {count} links, {len(problems)} broken")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
