"""The README is the user's page: short, free of the lab notebook's commit
hashes and issue numbers, and every link in it leads somewhere. The figures
and their history belong in doc/benchmarks.md."""

import re

import conftest

README = conftest.REPO / "README.md"
MAX_LINES = 200


def anchors(md):
    """The anchors GitHub gives the headings of markdown file @md."""
    out = set()
    for line in md.read_text().splitlines():
        m = re.match(r"#+ (.*)", line)
        if m:
            words = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower())
            out.add(words.replace(" ", "-"))
    return out


def test_readme_is_short():
    n = len(README.read_text().splitlines())
    assert n <= MAX_LINES, f"README.md has {n} lines (at most {MAX_LINES})"


def test_readme_names_no_commit_or_issue():
    text = README.read_text()
    # A hash: 7 to 40 hex digits with a digit and a letter among them.
    hashes = [w for w in re.findall(r"\b[0-9a-f]{7,40}\b", text)
              if re.search(r"\d", w) and re.search(r"[a-f]", w)]
    issues = re.findall(r"\bissues? #?\d+", text, re.I)
    assert hashes == [] and issues == []


def test_readme_links_lead_somewhere():
    text = README.read_text()
    bad = []
    for target in re.findall(r"\]\(([^)]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # not a file of the tree
        path, _, anchor = target.partition("#")
        f = (README.parent / path) if path else README
        if not f.exists():
            bad.append(target)
        elif anchor and f.suffix == ".md" and anchor not in anchors(f):
            bad.append(target)
    assert bad == []
