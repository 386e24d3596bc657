"""The documentation against the binaries: every `flowc ...` / `flowcd ...`
option and subcommand that README.md and docs/*.md describe must exist in
that command's `--help`, every FLOWC_* variable they name must be read by
code, and every long option the binaries have must be documented.

How options are tied to commands (the collector below; its own tests come
first in this file):

- Units. A fenced code block is read line by line (a trailing `\\`
  continues the line; `#` after whitespace starts a comment, which is
  skipped). Only blocks without a language or in sh/bash/shell/console are
  read; in a block without a language only lines starting at column 0 can
  be commands (the indented lines there are program output). A table row
  is split into cells at unescaped `|` (GFM); `\\|` inside a code span is a
  literal `|`. Other text is read by paragraph (list items and headings
  start new ones); a code span may wrap across lines.
- Command mentions. `flowc` or `flowcd` (also `.../bin/flowc`) as the first
  word of a code span or of a command in a code line (after a `$ ` prompt,
  `VAR=value` assignments, and in code lines `;`, `&&`, `||`, and ` | ` in
  sh blocks). `flowc:` / `flowc.v1` / `flowc-...` are not mentions. The
  subcommand path is the lowercase words that follow (at most two after
  `flowc`; `a|b` alternatives are expanded: `flowc daemon start|stop` is
  `flowc daemon start` and `flowc daemon stop`); options before the path
  (`flowc --socket S submit`) are the top-level command's. The options of
  a mention are the `--long` and `-x` tokens after it up to the next
  command; `-O3` is `-O`, `[--json]` is `--json`.
- Options outside a command span (a code span starting with `-`): tied to
  the nearest preceding command mention in the same sentence of the same
  paragraph or table cell. In a table row, where its cell has none, to the
  commands of the row's first cell (any one of them having it is enough);
  a first cell holding only options may name its commands in parentheses
  after them: `` `--input-shape NAME=DIMS` (submit, inspect, repro) `` is
  an option of each of the three. Anything else (a `--store` in a
  paragraph about another program) is left unattributed and not checked;
  so is every option after a command that is not flowc's (`cmake
  --build`, `bench/model_bench.py --runs 20`).

A documented option passes if that command's `--help` lists it or, for
flowc's subcommands, `flowc --help` lists it as a global option (and
test_global_options_work_after_the_subcommand checks those really parse
there).
"""
import dataclasses
import os
import pathlib
import re
import subprocess

import pytest

from conftest import BIN, ROOT

DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PROGRAMS = ("flowc", "flowcd")
MAX_PATH_WORDS = {"flowc": 2, "flowcd": 2}
SHELL_LANGUAGES = {"", "sh", "bash", "shell", "console"}
# Programs (not flowc) whose spans or code lines start a foreign command:
# its options are not flowc's, and it ends a flowc mention's reach.
FOREIGN_PROGRAMS = {"python", "python3", "bash", "sh", "cmake", "ninja", "ctest", "pytest",
                    "pip", "ccache", "gcc", "cc", "cp", "sha256sum", "export", "cd", "ls",
                    "rm", "git", "apt-get", "tee"}
PREFIX_WORDS = {"$", "sudo", "time", "env", "exec", "nohup"}

LONG = re.compile(r"(?<![\w.\-])--[A-Za-z0-9][A-Za-z0-9\-]*")
SHORT = re.compile(r"(?<![\w.\-])-([A-Za-z]+)")
PATH_WORD = re.compile(r"^[a-z][a-z0-9\-]*(?:\|[a-z][a-z0-9\-]*)*$")
ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=\S*$")
PROGRAM_TOKEN = re.compile(r"^(?:\S*/)?bin/(flowcd?)$|^(flowcd?)$")


@dataclasses.dataclass(frozen=True)
class Mention:
    """`option` documented at file:line for any one of `commands` (each a
    path such as 'flowc cache gc'); `commands` is empty where nothing could
    be tied to it."""
    file: str
    line: int
    option: str
    commands: tuple
    how: str  # "inline", "sentence", "row", "row-list", "unattributed"

    def where(self):
        return f"{self.file}:{self.line}"


@dataclasses.dataclass(frozen=True)
class CommandMention:
    file: str
    line: int
    command: str

    def where(self):
        return f"{self.file}:{self.line}"


@dataclasses.dataclass
class Collected:
    options: list = dataclasses.field(default_factory=list)
    commands: list = dataclasses.field(default_factory=list)

    def pairs(self):
        """(command, option) for every option tied to exactly one command."""
        return {(m.commands[0], m.option) for m in self.options if len(m.commands) == 1}

    def extend(self, other):
        self.options += other.options
        self.commands += other.commands


# --- tokens ------------------------------------------------------------------

@dataclasses.dataclass
class Token:
    text: str
    line: int


def tokenize(text, line_of):
    """Whitespace-separated tokens with their source line; `line_of(i)` maps
    an offset in `text` to a line number."""
    return [Token(m.group(), line_of(m.start())) for m in re.finditer(r"\S+", text)]


def options_in(token):
    """`--long` and `-x` options written in one token ('[-O', '-O3',
    '[--json]', '--max-size=5G', '-o/--output'); `-abc` is the flags a, b
    and c."""
    found = LONG.findall(token)
    for letters in SHORT.findall(LONG.sub(" ", token)):
        found += ["-" + c for c in letters]
    return found


def program_of(token):
    m = PROGRAM_TOKEN.match(token)
    return (m.group(1) or m.group(2)) if m else None


def is_foreign(tokens):
    """A command that is not flowc's: a script, a program under bin/, a
    known program, or a word followed by options (`cache_bench --dir`)."""
    if not tokens:
        return False
    head = tokens[0].text
    if program_of(head):
        return False
    if head.endswith((".py", ".sh")) or "bin/" in head or head in FOREIGN_PROGRAMS:
        return True
    return len(tokens) > 1 and re.match(r"^[\w.\-]+$", head) is not None \
        and bool(options_in(tokens[1].text)) and not head.startswith("-")


def skip_prefix(tokens):
    """Drops a `$ ` prompt, `sudo`/`time`/`env` and `VAR=value` assignments."""
    i = 0
    while i < len(tokens) and (tokens[i].text in PREFIX_WORDS
                               or ASSIGNMENT.match(tokens[i].text)):
        i += 1
    return tokens[i:]


class Segment:
    """One command's tokens: kind is 'flowc' (with command paths and
    options), 'foreign' or 'options' (a span of options alone) or 'other'."""

    def __init__(self, tokens):
        tokens = skip_prefix(tokens)
        self.tokens = tokens
        self.kind = "other"
        self.paths = []
        self.options = []  # (option, line)
        self.start_line = tokens[0].line if tokens else 0
        if not tokens:
            return
        program = program_of(tokens[0].text)
        if program:
            self.kind = "flowc"
            self._parse_program(program, tokens[1:])
        elif tokens[0].text.lstrip("[").startswith("-") and options_in(tokens[0].text):
            self.kind = "options"
            self.options = [(o, t.line) for t in tokens for o in options_in(t.text)]
        elif is_foreign(tokens):
            self.kind = "foreign"

    def _parse_program(self, program, rest):
        pre = []  # options before the subcommand path belong to the program itself
        i = 0
        while i < len(rest) and options_in(rest[i].text):
            pre += [(o, rest[i].line) for o in options_in(rest[i].text)]
            takes_value = "=" not in rest[i].text and i + 1 < len(rest) \
                and not options_in(rest[i + 1].text)
            i += 2 if takes_value else 1
        words = []
        while i < len(rest) and len(words) < MAX_PATH_WORDS[program] \
                and PATH_WORD.match(rest[i].text):
            words.append(rest[i].text.split("|"))
            i += 1
        paths = [[program]]
        for alternatives in words:
            paths = [p + [w] for p in paths for w in alternatives]
        self.paths = [" ".join(p) for p in paths]
        self.root = program
        self.pre_options = pre
        self.options = [(o, t.line) for t in rest[i:] for o in options_in(t.text)]


def split_commands(tokens, shell):
    """Splits a code line or span at flowc mentions and shell separators."""
    segments, current = [], []
    separators = {";", "&&", "||"} | ({"|"} if shell else set())
    for tok in tokens:
        text = tok.text
        if text in separators:
            segments.append(current)
            current = []
            continue
        if text.endswith(";") and len(text) > 1:
            current.append(Token(text[:-1], tok.line))
            segments.append(current)
            current = []
            continue
        # A program word elsewhere is an argument: `ls build/bin/flowc`.
        current.append(tok)
    segments.append(current)
    return [Segment(s) for s in segments if s]


# --- units -------------------------------------------------------------------

class Collector:
    def __init__(self, name):
        self.name = name
        self.out = Collected()

    def add_command_segment(self, seg, how="inline"):
        for path in seg.paths:
            self.out.commands.append(CommandMention(self.name, seg.start_line, path))
            for option, line in seg.options:
                self.out.options.append(Mention(self.name, line, option, (path,), how))
        for option, line in seg.pre_options:
            self.out.options.append(Mention(self.name, line, option, (seg.root,), how))

    def code_line(self, text, first_line, shell, column0_only):
        """One line of a fenced block (continuations joined)."""
        text = strip_comment(text)
        if column0_only and (not text or text[0].isspace()):
            return
        starts = [0] + [m.end() for m in re.finditer(r"\n", text)]

        def line_of(offset):
            return first_line + sum(1 for s in starts[1:] if s <= offset)

        for seg in split_commands(tokenize(text, line_of), shell):
            if seg.kind == "flowc":
                self.add_command_segment(seg)

    def prose(self, text, line_of, fallback=(), fallback_how="row"):
        """A paragraph or table cell: returns its flowc mentions' paths."""
        spans = code_spans(text)
        sentence_breaks = [m.start() for m in re.finditer(r"[.!?](?=\s+[A-Z])", text)
                           if not any(s <= m.start() < e for s, e, _ in spans)]
        owner = None  # (paths, sentence index) of the nearest preceding command
        owner_foreign = False
        found = []
        for start, end, content in spans:
            sentence = sum(1 for b in sentence_breaks if b < start)
            content = content.replace("\\|", "|")
            tokens = tokenize(content, lambda i, base=start + 1: line_of(base + i))
            for seg in split_commands(tokens, shell=False):
                if seg.kind == "flowc":
                    self.add_command_segment(seg)
                    owner, owner_foreign = (tuple(seg.paths), sentence), False
                    found += seg.paths
                elif seg.kind == "foreign":
                    owner, owner_foreign = ((), sentence), True
                elif seg.kind == "options":
                    if owner and owner[1] == sentence:
                        if not owner_foreign:
                            for option, line in seg.options:
                                self.out.options.append(
                                    Mention(self.name, line, option, owner[0], "sentence"))
                    elif fallback is not None and fallback:
                        for option, line in seg.options:
                            self.out.options.append(
                                Mention(self.name, line, option, tuple(fallback), fallback_how))
                    elif fallback is None:
                        pass  # the row's first cell is another program's
                    else:
                        for option, line in seg.options:
                            self.out.options.append(
                                Mention(self.name, line, option, (), "unattributed"))
        return found

    def table_row(self, text, line):
        cells = split_cells(text)
        if not cells or all(re.fullmatch(r"\s*:?-+:?\s*", c) for c in cells):
            return
        line_of = lambda _offset: line  # noqa: E731
        first = cells[0]
        first_paths = self.prose_cell_first(first, line_of)
        for cell in cells[1:]:
            self.prose(cell, line_of, fallback=first_paths)

    def prose_cell_first(self, cell, line_of):
        """The row's first cell: its commands are the row's. Options alone,
        followed by `(sub, sub)`, are options of those flowc subcommands."""
        spans = code_spans(cell)
        heads = []
        for _s, _e, content in spans:
            segs = split_commands(tokenize(content.replace("\\|", "|"), line_of), shell=False)
            heads += [s.kind for s in segs]
        if "flowc" in heads:
            return self.prose(cell, line_of, fallback=())
        if "foreign" in heads:
            self.prose(cell, line_of, fallback=None)
            return None
        # `(submit, inspect)` right after the last code span
        named = re.match(r"\s*\(\s*([a-z][a-z0-9\-]*(?:\s+[a-z][a-z0-9\-]*)*"
                         r"(?:\s*,\s*[a-z][a-z0-9\-]*(?:\s+[a-z][a-z0-9\-]*)*)*)\s*\)",
                         cell[spans[-1][1] + 1:]) if spans else None
        if named and "options" in heads:
            paths = tuple("flowc " + " ".join(n.split()) for n in named.group(1).split(",")
                          if n.strip())
            for path in paths:
                for _s, _e, content in spans:
                    seg = Segment(tokenize(content.replace("\\|", "|"), line_of))
                    for option, line in seg.options if seg.kind == "options" else ():
                        self.out.options.append(Mention(self.name, line, option, (path,),
                                                        "row-list"))
            return paths
        self.prose(cell, line_of, fallback=())
        return ()


def strip_comment(text):
    m = re.search(r"(^|\s)#", text)
    return text[:m.start()] if m else text


def code_spans(text):
    """(start, end, content) of each `code span` (backtick runs of equal
    length; a span may hold newlines)."""
    spans, i = [], 0
    while True:
        m = re.compile(r"`+").search(text, i)
        if not m:
            return spans
        ticks = m.group()
        close = text.find(ticks, m.end())
        while close != -1 and text[close + len(ticks):close + len(ticks) + 1] == "`":
            close = text.find(ticks, close + len(ticks) + 1)
        if close == -1:
            return spans
        spans.append((m.start() + len(ticks) - 1, close, text[m.end():close]))
        i = close + len(ticks)


def split_cells(row):
    row = row.strip()
    if row.startswith("|"):
        row = row[1:]
    if row.endswith("|") and not row.endswith("\\|"):
        row = row[:-1]
    return re.split(r"(?<!\\)\|", row)


def collect_text(text, name):
    """Collects one markdown document."""
    c = Collector(name)
    lines = text.split("\n")
    i = 0
    paragraph = []  # (line number, text)

    def flush():
        if paragraph:
            joined = "\n".join(t for _, t in paragraph)
            starts, pos = [], 0
            for number, t in paragraph:
                starts.append((pos, number))
                pos += len(t) + 1

            def line_of(offset):
                return max(n for s, n in starts if s <= offset)

            c.prose(joined, line_of)
            paragraph.clear()

    while i < len(lines):
        line, number = lines[i], i + 1
        fence = re.match(r"^\s*(```+|~~~+)\s*([\w+-]*)", line)
        if fence:
            flush()
            marker, language = fence.group(1), fence.group(2).lower()
            i += 1
            block = []
            while i < len(lines) and not lines[i].strip().startswith(marker):
                block.append((i + 1, lines[i]))
                i += 1
            i += 1  # the closing fence
            if language in SHELL_LANGUAGES:
                shell = language != ""
                j = 0
                while j < len(block):
                    first, text_ = block[j]
                    while text_.endswith("\\") and j + 1 < len(block):
                        j += 1
                        text_ = text_[:-1] + "\n" + block[j][1]
                    c.code_line(text_, first, shell=shell, column0_only=not shell)
                    j += 1
            continue
        if line.lstrip().startswith("|"):
            flush()
            c.table_row(line, number)
        elif not line.strip():
            flush()
        elif re.match(r"^\s*#{1,6}\s", line):
            flush()
            paragraph.append((number, line))
            flush()
        elif re.match(r"^\s*([-*+]\s|\d+[.)]\s)", line):
            flush()
            paragraph.append((number, line))
        else:
            paragraph.append((number, line))
        i += 1
    flush()
    return c.out


def collect_docs(files=DOC_FILES):
    out = Collected()
    for path in files:
        out.extend(collect_text(path.read_text(), str(path.relative_to(ROOT))))
    return out


# --- the collector's own tests ---------------------------------------------

def test_table_row_with_two_commands():
    row = ("| `flowc status [--json]`, `flowc daemon start\\|stop [--wait]` | "
           "Daemon state; with `--json` one object. |")
    out = collect_text(row, "t.md")
    assert ("flowc status", "--json") in out.pairs()
    assert ("flowc daemon start", "--wait") in out.pairs()
    assert ("flowc daemon stop", "--wait") in out.pairs()
    assert ("flowc status", "--wait") not in out.pairs()
    prose = [m for m in out.options if m.how == "row"]
    assert [(m.option, m.commands) for m in prose] == \
        [("--json", ("flowc status", "flowc daemon start", "flowc daemon stop"))]
    assert {c.command for c in out.commands} == \
        {"flowc status", "flowc daemon start", "flowc daemon stop"}


def test_table_row_options_with_named_subcommands_and_escaped_pipes():
    out = collect_text("| `--print-ir-after NAME\\|all`, `-O 0..3` (submit, cache gc) | "
                       "e.g. `--print-ir-after all` |\n|---|---|", "t.md")
    assert {("flowc submit", "--print-ir-after"), ("flowc cache gc", "--print-ir-after"),
            ("flowc submit", "-O"), ("flowc cache gc", "-O")} <= out.pairs()
    assert [m.commands for m in out.options if m.how == "row"] == \
        [("flowc submit", "flowc cache gc")]


def test_table_row_of_another_program_attributes_nothing():
    out = collect_text("| `build/bin/ingest_bench M [--store DIR]` | with `--store`; "
                       "cold `flowc submit -O3` |", "t.md")
    assert out.pairs() == {("flowc submit", "-O")}
    assert all(m.commands for m in out.options)


def test_fenced_block_with_comments_and_several_commands():
    text = "\n".join([
        "```sh",
        "export PATH=$PWD/build/bin:$PATH",
        "flowc submit m.onnx -o m.fca --json   # {\"artifact\": …, --not-an-option",
        "#   flowc run --ignored",
        "FLOWC_AUTOSTART=0 build/bin/flowc --socket s cache gc --max-size 5G ; flowc cache pin d",
        "flowcd --cache-dir D \\",
        "    --workers 2 | tee log",
        "cmake --build build --target flowc",
        "```",
        "```",
        "flowc cache ls [--limit N]",
        "  flowc ingest s  --x   (indented: output, not a command)",
        "```",
        "```json",
        "flowc submit --in-json",
        "```",
    ])
    out = collect_text(text, "t.md")
    assert out.pairs() == {
        ("flowc submit", "-o"), ("flowc submit", "--json"), ("flowc", "--socket"),
        ("flowc cache gc", "--max-size"), ("flowcd", "--cache-dir"), ("flowcd", "--workers"),
        ("flowc cache ls", "--limit")}
    workers = next(m for m in out.options if m.option == "--workers")
    assert workers.line == 7
    assert {c.command for c in out.commands} == {
        "flowc submit", "flowc cache gc", "flowc cache pin", "flowcd", "flowc cache ls"}


def test_prose_options_tie_to_the_nearest_command_in_the_sentence():
    text = ("Run `flowc cache verify` to re-hash (exit 1 if bad);\n"
            "`--repair` moves bad ones aside, and `flowc submit\n--progress` reports.\n"
            "A later sentence: `--alone` is not tied. Use `bench/x.py` with `--runs 3`.\n\n"
            "- `flowc run --threads T`: threads\n"
            "- `--json` in a new list item\n\n"
            "Not mentions: `flowc.v1`, `flowc-derive-weights`, `flowc: error: x`, "
            "`~/.cache/flowc`, `FLOWC_AUTOSTART=0`.")
    out = collect_text(text, "t.md")
    assert out.pairs() == {("flowc cache verify", "--repair"), ("flowc submit", "--progress"),
                           ("flowc run", "--threads")}
    progress = next(m for m in out.options if m.option == "--progress")
    assert progress.line == 3 and progress.how == "inline"
    loose = {m.option for m in out.options if not m.commands}
    assert loose == {"--alone", "--json"}
    assert {c.command for c in out.commands} == \
        {"flowc cache verify", "flowc submit", "flowc run"}


def test_option_tokens():
    assert options_in("[-O") == ["-O"]
    assert options_in("-O3") == ["-O"]
    assert options_in("-O1..-O3") == ["-O"]
    assert options_in("[--json]") == ["--json"]
    assert options_in("--max-size=5G") == ["--max-size"]
    assert options_in("-abc") == ["-a", "-b", "-c"]
    assert options_in("-o/--output") == ["--output", "-o"]
    assert options_in("flowc-derive-weights") == []
    assert options_in("1e-4") == []
    assert options_in("-_.") == []


@pytest.fixture(scope="module")
def docs():
    return collect_docs()


def test_collector_reads_the_real_docs(docs):
    """The collector finds what README.md and docs/ plainly document, so
    the checks below cannot pass by collecting nothing."""
    readme = collect_docs([ROOT / "README.md"]).pairs()
    assert len(readme) > 20, readme
    for expected in [("flowc submit", "--json"), ("flowc run", "--output-dir"),
                     ("flowc submit", "-o"), ("flowc submit", "--input-shape"),
                     ("flowc repro", "--input-shape"), ("flowc cache gc", "--json"),
                     ("flowcd", "--workers")]:
        assert expected in readme, expected
    pairs = docs.pairs()
    assert readme < pairs
    for expected in [("flowc cache gc", "--max-size"), ("flowc cache verify", "--repair"),
                     ("flowc cache ls", "--limit")]:
        assert expected in pairs, expected
    commands = {c.command for c in docs.commands}
    assert {"flowc submit", "flowc daemon start", "flowc daemon stop", "flowc cache gc",
            "flowcd"} <= commands


# --- the binaries' --help ----------------------------------------------------

def help_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWC_")}
    env["FLOWC_AUTOSTART"] = "0"
    return env


def help_text(command):
    words = command.split()
    result = subprocess.run([str(BIN / words[0]), *words[1:], "--help"], capture_output=True,
                            text=True, timeout=60, env=help_env())
    assert result.returncode == 0, f"`{command} --help` failed ({result.returncode}): " \
        f"{result.stderr}"
    return result.stdout + result.stderr


def help_sections(text):
    """{section title: [lines]} of CLI11's help ('Options', 'Subcommands')."""
    sections, current = {}, None
    for line in text.splitlines():
        m = re.match(r"^(\w[\w ]*):\s*$", line)
        if m:
            current = sections.setdefault(m.group(1), [])
        elif current is not None and line.strip():
            current.append(line)
    return sections


@dataclasses.dataclass
class Help:
    options: list  # alias groups, e.g. ['-o', '--output']
    takes_value: list  # per group: shows a value type ('--socket TEXT')
    children: list

    def names(self):
        return {name for group in self.options for name in group}


def parse_help(text):
    sections = help_sections(text)
    options, takes_value = [], []
    for line in sections.get("Options", []):
        m = re.match(r"^\s+(-\S+)( [A-Z][A-Z0-9_:]*(?:\s|$))?", line)
        if m:
            # A flag with a value when given bare prints it: `--progress{text}`.
            names = re.sub(r"\{[^}]*\}", "", m.group(1))
            options.append([n for n in names.split(",") if n.startswith("-")])
            takes_value.append(m.group(2) is not None)
    children = [line.split()[0] for line in sections.get("Subcommands", [])
                if re.match(r"^\s+[a-z]", line)]
    return Help(options, takes_value, children)


def test_help_parser():
    text = "\n".join([
        "flowc: compile ML models",
        "Usage: flowc [OPTIONS] SUBCOMMAND",
        "",
        "Options:",
        "  -h,--help                   Print this help message and exit",
        "  --cache-dir TEXT            Cache directory (env FLOWC_CACHE_DIR)",
        "  -O,--opt-level INT:INT in [0 - 3]",
        "                              Code optimization level 0..3",
        "  --json                      Print one JSON object",
        "  --progress{text} :{text,json}",
        "                              Progress events",
        "",
        "Subcommands:",
        "  submit                      Compile a model through the daemon",
        "  cache                       Inspect and maintain the daemon's cache",
        "",
    ])
    h = parse_help(text)
    assert h.options == [["-h", "--help"], ["--cache-dir"], ["-O", "--opt-level"], ["--json"],
                         ["--progress"]]
    assert h.takes_value == [False, True, True, False, False]
    assert h.children == ["submit", "cache"]
    tree_ = {"flowc": h, "flowc submit": Help([], [], []), "flowc cache": Help([], [], ["gc"]),
             "flowc cache gc": Help([], [], [])}
    assert resolve("flowc submit", tree_) == ("flowc submit", None)
    assert resolve("flowc cache gc", tree_) == ("flowc cache gc", None)
    assert resolve("flowc submit model", tree_) == ("flowc submit", None)
    assert resolve("flowc compile", tree_)[1].startswith("`flowc` has no subcommand `compile`")


@pytest.fixture(scope="module")
def tree():
    """{command path: Help} of every flowc and flowcd (sub)command."""
    for program in PROGRAMS:
        assert (BIN / program).exists(), f"{BIN / program} missing: build first " \
            f"(or set FLOWC_BIN_DIR)"
    found, todo = {}, list(PROGRAMS)
    while todo:
        command = todo.pop()
        found[command] = parse_help(help_text(command))
        todo += [f"{command} {child}" for child in found[command].children]
    return found


def resolve(command, tree):
    """The documented path as the binaries know it: ('flowc submit', None),
    or (None, message) for a subcommand that does not exist. Words past a
    command without subcommands were positionals ('flowcd peak')."""
    words = command.split()
    node = words[0]
    for word in words[1:]:
        if f"{node} {word}" in tree:
            node = f"{node} {word}"
        elif tree[node].children:
            return None, f"`{node}` has no subcommand `{word}` " \
                f"(it has: {', '.join(tree[node].children)})"
        else:
            break
    return node, None


def test_documented_subcommands_exist(docs, tree):
    missing = sorted({f"{c.where()}: `{c.command}`: {resolve(c.command, tree)[1]}"
                      for c in docs.commands if resolve(c.command, tree)[1]})
    assert not missing, "documented subcommands the binaries lack:\n" + "\n".join(missing)


def test_documented_options_exist(docs, tree):
    """Each option the docs give a command is in that command's --help (or,
    for flowc's subcommands, is one of flowc's global options)."""
    globals_ = tree["flowc"].names()
    missing = []
    for m in docs.options:
        if not m.commands:
            continue
        accepted, names = False, []
        for command in m.commands:
            node, error = resolve(command, tree)
            if error:
                accepted = True  # reported by test_documented_subcommands_exist
                break
            names.append(node)
            known = tree[node].names() | (globals_ if node.startswith("flowc ") else set())
            if m.option in known:
                accepted = True
                break
        if not accepted:
            where = " or ".join(f"`{n} --help`" for n in names)
            missing.append(f"{m.where()}: {m.option} (for {' / '.join(m.commands)}; "
                           f"not in {where})")
    missing = sorted(set(missing))
    assert not missing, \
        "options the docs describe but the binaries lack:\n" + "\n".join(missing)


def test_global_options_work_after_the_subcommand(tree, tmp_path):
    """flowc's global options are accepted after a subcommand too (the docs
    test above accepts them there): parse errors exit 2; with no daemon and
    FLOWC_AUTOSTART=0 these commands fail with 5 instead."""
    value_options = []
    for group, takes_value in zip(tree["flowc"].options, tree["flowc"].takes_value):
        if "--help" in group or "--version" in group:
            continue
        long = next((n for n in group if n.startswith("--")), group[0])
        value_options.append((long, takes_value))
    assert value_options, "flowc --help lists no global options"
    failures = []
    for subcommand in (["status"], ["cache", "stats"]):
        for option, takes_value in value_options:
            args = [option] + ([str(tmp_path / "none")] if takes_value else [])
            cmd = [str(BIN / "flowc"), *subcommand, *args]
            result = subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                                    env={**help_env(), "FLOWC_CACHE_DIR": str(tmp_path),
                                         "FLOWC_SOCKET": str(tmp_path / "none.sock")})
            if result.returncode == 2:
                failures.append(f"`flowc {' '.join(subcommand)} {' '.join(args)}` exits 2: "
                                f"{result.stderr.strip()}")
    assert not failures, "global options refused after the subcommand:\n" + "\n".join(failures)


def test_options_in_help_are_documented(docs, tree):
    """Every long option of each (sub)command's --help is documented for
    that command (any alias counts; flowc's global options anywhere)."""
    documented = {}
    anywhere = {m.option for m in docs.options}
    for m in docs.options:
        for command in m.commands:
            node, error = resolve(command, tree)
            if not error:
                documented.setdefault(node, set()).add(m.option)
    missing = []
    for command, help_ in sorted(tree.items()):
        for group in help_.options:
            if "--help" in group or not any(n.startswith("--") for n in group):
                continue
            known = anywhere if command == "flowc" else documented.get(command, set())
            if not set(group) & known:
                missing.append(f"`{command}` {','.join(group)}")
    assert not missing, "options the binaries have but README.md and docs/ never " \
        "describe:\n" + "\n".join(missing)


# --- environment variables ---------------------------------------------------

SOURCE_DIRS = ["cli", "daemon", "cache", "worker", "support", "scheduler", "runtime",
               "compiler", "python", "scripts"]
SOURCE_FILES = ["tests/e2e/conftest.py", "CMakeLists.txt"]
SOURCE_SUFFIXES = {".cpp", ".cc", ".c", ".h", ".hpp", ".py", ".sh", ".bash"}


def source_files():
    for d in SOURCE_DIRS:
        for path in sorted((ROOT / d).rglob("*")) if (ROOT / d).is_dir() else []:
            if path.is_file() and (path.suffix in SOURCE_SUFFIXES or (
                    not path.suffix and path.read_bytes()[:2] == b"#!")):
                yield path
    for f in SOURCE_FILES:
        if (ROOT / f).exists():
            yield ROOT / f


CODE_OR_COMMENT = re.compile(r"""'(?:\\.|[^'\\\n])'|"(?:\\.|[^"\\\n])*"|//[^\n]*|/\*.*?\*/""",
                             re.S)


def without_comments(path, text):
    """C/C++ text without // and /* */ comments (string literals kept);
    Python and shell text without whole-line # comments."""
    if path.suffix in {".cpp", ".cc", ".c", ".h", ".hpp"}:
        return CODE_OR_COMMENT.sub(lambda m: m.group() if m.group()[0] in "'\"" else " ", text)
    return re.sub(r"(?m)^\s*#.*$", "", text)


def read_in_code(name, text):
    """`name` as a string literal ("FLOWC_X", 'FLOWC_X'), a shell
    expansion ($FLOWC_X, ${FLOWC_X...}) or a CMake option (option(FLOWC_X)."""
    return re.search(r"""["']%s["']|\$\{?%s\b|^\s*option\(%s\b""" % (name, name, name), text,
                     re.M) is not None


def test_documented_environment_variables_are_read():
    documented = {}
    for path in DOC_FILES:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for name in re.findall(r"\bFLOWC_[A-Z0-9_]*[A-Z0-9]", line):
                documented.setdefault(name, []).append(f"{path.relative_to(ROOT)}:{number}")
    assert "FLOWC_CACHE_DIR" in documented, "the collector found no FLOWC_ variables"
    sources = [without_comments(p, p.read_text(errors="replace")) for p in source_files()]
    assert sources, "no source files found"
    missing = [f"{name} ({', '.join(where)})" for name, where in sorted(documented.items())
               if not any(read_in_code(name, text) for text in sources)]
    assert not missing, "environment variables the docs describe but no code reads:\n" + \
        "\n".join(missing)
