"""Every default the documentation names is the one the daemon runs with.

fs/options.def is the daemon's table of options (name, type, default,
bounds, help); the parser, its checks and --help are made from it. This
file reads the same table and checks every markdown and man page against
it (the README, doc/, CONTRIBUTING.md...; not CHANGELOG.md's history): the
option tables, the man pages' "Default:" lines and prose such as "the
default `-o pace_ms=1000`". Needs no mount."""

import re
import subprocess

import conftest

REPO = conftest.REPO
TABLE = REPO / "fs" / "options.def"
# The options whose default is a value a user could write (not prose).
NUMBER_TYPES = ("OPT_NUM", "OPT_S", "OPT_MS", "OPT_SIZE", "OPT_SIZE_PCT")


def _c_args(text, i):
    """The top-level arguments of the macro call whose '(' is before @i,
    each as its text, and the index after the ')'."""
    args, cur, depth, in_str = [], [], 0, False
    while True:
        c = text[i]
        i += 1
        if in_str:
            cur.append(c)
            if c == "\\":
                cur.append(text[i])
                i += 1
            elif c == '"':
                in_str = False
            continue
        if c == '"':
            in_str = True
        elif c == "(":
            depth += 1
        elif c == ")":
            if depth == 0:
                args.append("".join(cur).strip())
                return args, i
            depth -= 1
        elif c == "," and depth == 0:
            args.append("".join(cur).strip())
            cur = []
            continue
        cur.append(c)


def _c_string(arg):
    """The value of a C argument made of string literals; None for NULL."""
    if arg == "NULL":
        return None
    return "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', arg))


def options_table():
    """{name: (type, default)} from fs/options.def."""
    text = re.sub(r"/\*.*?\*/", "", TABLE.read_text(), flags=re.S)
    rows, i = {}, 0
    while (i := text.find("HINTFS_OPT(", i)) >= 0:
        args, i = _c_args(text, i + len("HINTFS_OPT("))
        assert len(args) == 9, args
        rows[args[0]] = (args[1], _c_string(args[4]))
    return rows


def number_defaults():
    return {name: d for name, (t, d) in options_table().items()
            if t in NUMBER_TYPES}


def docs():
    """Every page a user or contributor reads: the markdown and man pages
    git tracks, but CHANGELOG.md (older releases had other defaults) and
    tests/data (vectors as they came)."""
    git = subprocess.run(["git", "-C", str(REPO), "ls-files", "*.md", "*.1"],
                         capture_output=True, text=True)
    if git.returncode == 0 and git.stdout:
        paths = git.stdout.split()
    else:  # a tree without git (a source package)
        paths = [str(p.relative_to(REPO)) for p in
                 [*REPO.glob("*.md"), *REPO.glob("*/*.md"),
                  *REPO.glob("doc/*.1")]]
    return [REPO / p for p in sorted(paths)
            if p != "CHANGELOG.md" and not p.startswith("tests/data/")]


def markdown_table_defaults(path):
    """(line, option, default cell) for each row of an options table in
    markdown file @path: | `-o name=X` | default | meaning |."""
    out = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) < 3:
            continue
        for name in re.findall(r"`-o ([a-z_]+)", cells[0]):
            out.append((n, name, cells[1].replace("`", "")))
    return out


def _troff_text(lines):
    text = " ".join(re.sub(r"^\.[A-Z]{1,2} ", "", ln) for ln in lines)
    return text.replace("\\-", "-").replace("\\&", "").replace("\\c", "")


def man_defaults(path):
    """{option: [defaults]} from the entries of man page @path: a .TP whose
    tag is -o NAME, and each "Default: VALUE" in its text."""
    out, name, body = {}, None, []
    for line in path.read_text().splitlines() + [".TP"]:
        if line.startswith((".TP", ".SH", ".SS", ".PP")):
            if name:
                out.setdefault(name, []).extend(re.findall(
                    r"Default: *([0-9][0-9A-Za-z%]*)", _troff_text(body)))
            name, body = None, []
            continue
        m = re.match(r'\.BI? "?\\-o ([a-z_]+)', line)
        if m and name is None and not body:
            name = m.group(1)
        else:
            body.append(line)
    return out


def test_the_table_holds_the_options():
    rows = options_table()
    numbers = number_defaults()
    # A sample the rest of the suite relies on, and one of each type.
    assert numbers["window"] == "4096" and numbers["fetch_mem"] == "0"
    assert rows["no_sign"][0] == "OPT_FLAG" and rows["endpoint"][0] == "OPT_STR"
    assert len(numbers) >= 14 and all(numbers.values())


def test_markdown_option_tables_state_the_defaults():
    numbers = number_defaults()
    wrong, seen = [], set()
    for path in docs():
        if path.suffix != ".md":
            continue
        for n, name, cell in markdown_table_defaults(path):
            if name in numbers:
                seen.add((path.name, name))
                if cell != numbers[name]:
                    wrong.append(f"{path.name}:{n}: -o {name} default "
                                 f"'{cell}', the table's is "
                                 f"'{numbers[name]}'")
    assert wrong == []
    # The reference page lists every one of them.
    missing = [n for n in numbers if ("configuration.md", n) not in seen]
    assert missing == [], f"doc/configuration.md has no row for {missing}"


def test_man_page_defaults():
    numbers = number_defaults()
    wrong, missing = [], []
    man = man_defaults(REPO / "doc" / "hintfs.1")
    for name, want in numbers.items():
        got = man.get(name, [])
        if not got:
            missing.append(name)
        wrong += [f"hintfs.1: -o {name} says Default: {g}, the table's "
                  f"is {want}" for g in got if g != want]
    assert wrong == []
    assert missing == [], f"hintfs.1 gives no default for {missing}"
    # Every other man page: what it names, it names right.
    for path in docs():
        if path.suffix == ".1" and path.name != "hintfs.1":
            for name, got in man_defaults(path).items():
                if name in numbers:
                    assert set(got) <= {numbers[name]}, (path.name, name)


# A path of the tree as the docs write it: under one of the folders that
# moved or hold scripts a reader runs (bench/, mount-tools/, tests/...).
TREE_PATH = re.compile(r"(?<![\w./-])((?:bench|mount-tools|tests/servers|"
                       r"tests/integration|tests/unit)/[\w./-]*[\w/])")
# What the docs name that a build makes, not git: pip's outputs.
GENERATED = ("mount-tools/python/build", "mount-tools/python/hintfs.egg-info")


def stale_paths(paths):
    """(doc, path) for each tree path a doc of @paths names that does not
    exist: a file or folder moved or removed without its docs."""
    stale = []
    for doc in paths:
        for m in TREE_PATH.finditer(doc.read_text()):
            rel = m.group(1).rstrip("/.")
            if "<" in rel or rel in GENERATED or rel.endswith("/test_"):
                continue  # a pattern ("tests/unit/test_<module>.c")
            if not (REPO / rel).exists():
                stale.append((doc.name, rel))
    return stale


def test_docs_name_paths_that_exist(tmp_path):
    """The commands and files the docs name (bench/bench.sh,
    tests/servers/rgw.sh...) are where they say; one that moved is caught."""
    assert stale_paths(docs()) == []
    moved = tmp_path / "moved.md"
    moved.write_text("Run `bash mount-tools/bench.sh --quick` and "
                     "`mount-tools/testbed/rgw.sh start DIR`.\n")
    assert stale_paths([moved]) == [("moved.md", "mount-tools/bench.sh"),
                                    ("moved.md", "mount-tools/testbed/rgw.sh")]


def test_prose_defaults():
    """"the default `-o pace_ms=1000`": an assignment the word "default"
    comes just before, in any doc, is the table's default."""
    numbers = number_defaults()
    wrong = []
    for path in docs():
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for m in re.finditer(r"\b([a-z_]+)=(\d+[KMGT%]?)\b", line):
                name, value = m.groups()
                # "default" after any other assignment before this one
                before = line[max(0, m.start() - 30):m.start()]
                before = before.rsplit("=", 1)[-1]
                if name in numbers and re.search(r"\bdefault\b", before):
                    if value != numbers[name]:
                        wrong.append(f"{path.name}:{n}: {m.group(0)} "
                                     f"called the default, the table's "
                                     f"is {numbers[name]}")
    assert wrong == []


def test_a_wrong_default_is_caught(tmp_path):
    """The checks find what they look for: a table row and a man entry
    with another default are reported."""
    md = tmp_path / "x.md"
    md.write_text("| option | default | meaning |\n|---|---|---|\n"
                  "| `-o window=N` | 1024 | ahead |\n")
    assert markdown_table_defaults(md) == [(3, "window", "1024")]
    man = tmp_path / "x.1"
    man.write_text('.TP\n.BI "\\-o window=" N\nAhead.\nDefault: 1024.\n'
                   '.TP\n.BI "\\-o cache_size=" SIZE\nBytes.\nDefault:\n'
                   '.BR 10% .\n.SH FILES\n')
    assert man_defaults(man) == {"window": ["1024"], "cache_size": ["10%"]}
