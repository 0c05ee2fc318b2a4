"""The documentation's examples run: every code block of README.md and docs/*.md that a user would paste.

Shell blocks (```bash, ```sh, ```shell; ```console runs its `$ ` lines) run with bash in a working folder (also
$HOME): `docs/` (the bundled examples/docs, plus a copy of one report, an old.pdf and an archive/, as team folders
have), `examples/`, the files the examples name (questions.txt, questions.jsonl, meta.json, a byaldi index in
.byaldi/old-index), and an index of `docs/` (plus one named `eval` of examples/eval/docs) built once per session.
The default model (what a command without --model loads) is the tiny test checkpoint under its hub id, in an
offline Hugging Face cache of the test's own. `lgpt-index` is on PATH. Each shell block starts from that folder as
it was built (restored in place: an index names its documents by absolute path). ```python blocks run in order, in
one namespace, where the page's shell block before them left the folder.

What the runner does besides running a block as written:
- a command that runs until Ctrl-C (`serve`, `watch`, `mcp --http`) runs in the background, the next line once it
  answers HTTP on its port (a watch: once its first build ended), and it is stopped with SIGTERM when the block ends
  (it must then exit 0); `mcp` on stdio gets no input, and ends;
- a server a block starts, or that a Python block asks (`127.0.0.1:8765`), is on a free port: the block's 8765
  (serve's default) and 8766 (`mcp --http`'s) are rewritten to it, since tests run side by side;
- a marker comment on the line before a block changes how it runs: `<!-- doc-test: skip REASON: why -->` does
  not run it (REASON one of SKIP_REASONS), `<!-- doc-test: lines -->` runs each line alone (a block of
  alternatives, not a script), `<!-- doc-test: exits N -->` expects the block's last command to exit N.
Blocks in another language (json, toml) or none are samples (output, a file's content) and are not run.

A failure names the block (page:line), the command and the tail of its output. The slow test prints every block
it ran and every block it skipped, with the reason, and writes that summary to doc-examples.json beside it.
The fast-tier tests check what can be checked without running: the markers, the plan, the Python API page
with the fake model."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from docgen import make_pdf
from forkserver import SOCKET_ENV
from helpers import free_port

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PYTHON_API = ROOT / "docs" / "python-api.md"
FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
MARKER = re.compile(r"<!--\s*doc-test:\s*(.*?)\s*-->")
SHELL = ("bash", "sh", "shell", "console")
SKIP_REASONS = {
    "needs-gpu": "a GPU (CUDA) machine",
    "needs-hub": "a model from the Hugging Face hub",
    "needs-qdrant": "a Qdrant server",
    "needs-network": "packages or models from the network, or root (apt-get, pip install)",
    "dev-only": "a developer's procedure over the repository: the test suite, the demo, a benchmark corpus",
}
# A block with no language whose first line reads like one of these is a command that must be tagged
COMMAND_LIKE = re.compile(r"^\s*(\$ |lgpt-index |pip |python |curl |export |hf |ray )")
# What runs until Ctrl-C; `mcp` on stdio is not among them: it ends when its input does (the runner gives it none)
LONG_RUNNING = re.compile(r"^\s*lgpt-index\s+(serve|watch)\b|^\s*lgpt-index\s+mcp\b.*\s--http\b")
SERVE_PORT, MCP_PORT = "8765", "8766"
# The examples issue 42 found failing when pasted, (page, what the block says): each must run, none may be skipped
MUST_RUN = (("docs/integrations.md", "LgptRetriever.from_server("), ("docs/hybrid.md", "open_index("),
            ("docs/python-api.md", "build_index("), ("docs/eval.md", "lgpt-index eval examples/eval/queries.jsonl"),
            ("docs/localgpt.md", "RAGMultiModalModel.from_index("))
TAIL = 3000


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page: where it starts (its fence's line), its language, its code, its marker."""

    page: str  # relative to the repository: README.md, docs/eval.md
    line: int
    language: str
    code: str
    marker: str

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def kind(self) -> str:
        if self.language in SHELL:
            return "shell"
        return "python" if self.language == "python" else "sample"

    @property
    def skip(self) -> str | None:
        """Why this block is not run (None: it runs)."""
        if self.kind == "sample":
            return f"not a command: a {self.language or 'plain'} sample"
        words = self.marker.split(maxsplit=1)
        if words[:1] == ["skip"]:
            return words[1] if len(words) > 1 else "skip (no reason given)"
        return None

    def commands(self) -> list[tuple[int, str]]:
        """(page line, text) of each line to run: a console block's `$ ` lines, every other block's lines."""
        lines = [(self.line + 1 + n, text) for n, text in enumerate(self.code.splitlines())]
        if self.language == "console":
            return [(n, text[2:]) for n, text in lines if text.startswith("$ ")]
        return lines


def pages() -> list[Path]:
    return [README, *sorted((ROOT / "docs").glob("*.md"))]


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of a page, each with the doc-test marker on the line before it ('' without one)."""
    text = page.read_text()
    found = []
    for match in FENCE.finditer(text):
        before = text[:match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = MARKER.search(before)
        found.append(Block(str(page.relative_to(ROOT)), text.count("\n", 0, match.start()) + 1, match.group(1),
                           match.group(2), marker.group(1) if marker else ""))
    return found


def all_blocks() -> list[Block]:
    return [block for page in pages() for block in blocks(page)]


# --- the fast tier: the plan, without running -------------------------------------------------------------------

def test_markers_name_a_known_reason_and_samples_are_not_commands():
    problems = []
    for block in all_blocks():
        words = block.marker.split()
        if block.marker and words[0] not in ("skip", "lines", "exits"):
            problems.append(f"{block.where}: unknown doc-test marker {block.marker!r}")
        if words[:1] == ["skip"] and (len(words) < 2 or words[1].rstrip(":") not in SKIP_REASONS):
            problems.append(f"{block.where}: a skip needs one of {sorted(SKIP_REASONS)} and why: {block.marker!r}")
        first = next((line for line in block.code.splitlines() if line.strip()), "")
        if block.kind == "sample" and block.page != "docs/cli.md" and COMMAND_LIKE.match(first):
            problems.append(f"{block.where}: reads like a command ({first.strip()[:60]!r}): tag it bash or python")
    assert problems == []


def must_run() -> list[Block]:
    """The blocks of MUST_RUN, one for each (the test fails where a page no longer has it)."""
    found = []
    for page, says in MUST_RUN:
        chosen = [block for block in all_blocks() if block.page == page and says in block.code and block.kind != "sample"]
        assert chosen, f"{page} has no code block with {says!r}"
        found.append(chosen[0])
    return found


def test_the_examples_issue_42_found_failing_are_run():
    assert [(block.where, block.skip) for block in must_run() if block.skip] == []


def python_blocks(text: str) -> list[tuple[int, str]]:
    """(first line number, code) of each ```python block."""
    return [(text.count("\n", 0, m.start(2)) + 1, m.group(2)) for m in FENCE.finditer(text) if m.group(1) == "python"]


def test_the_python_api_page_has_examples_of_the_whole_api():
    code = "\n".join(block for _, block in python_blocks(PYTHON_API.read_text()))
    for name in ("build_index", "BuildOptions", "open_store", "open_index", ".search(", "search_vectors",
                 "page_image", "load_rules", "LgptError"):
        assert name in code, name


def test_the_python_api_examples_import_only_the_root_package():
    for line, block in python_blocks(PYTHON_API.read_text()):
        assert not re.search(r"\b(from|import) localgpt_index\.", block), f"python-api.md:{line}: not the root API"


def test_the_python_api_examples_run_with_the_fake_model(tmp_path, fake_model, monkeypatch):
    """In this process, with the fake model, on two PDFs and a copy of one (the slow test runs them on the examples)."""
    docs = tmp_path / "examples-docs"
    make_pdf(docs / "q3-report.pdf", ["Q3 revenue", "Costs"])
    make_pdf(docs / "hiring.pdf", ["Hiring plan"])
    shutil.copy(docs / "q3-report.pdf", docs / "q3-report-copy.pdf")
    monkeypatch.setenv("LGPT_EXAMPLE_MODEL", str(fake_model))
    monkeypatch.setenv("LGPT_EXAMPLE_DOCS", str(docs))
    namespace: dict = {"__name__": "python_api_examples"}
    blocks = python_blocks(PYTHON_API.read_text())
    assert len(blocks) >= 5
    for line, block in blocks:
        # the line numbers of a failure point into the page
        exec(compile("\n" * (line - 1) + block, str(PYTHON_API), "exec"), namespace)
    assert sorted(p.name for p in tmp_path.glob("page-*.png")) == ["page-1.png"]


# --- the slow tier: every block runs -----------------------------------------------------------------------------

@dataclass
class Workplace:
    """The working folder (`path`), its pristine copy, and the environment the examples run in."""

    path: Path
    pristine: Path
    env: dict[str, str]

    def restore(self) -> None:
        shutil.rmtree(self.path)
        shutil.copytree(self.pristine, self.path, symlinks=True)


QUESTIONS = [{"query": "annual report revenue", "relevant": [{"path": "reports/annual-report.pdf", "page": 1}]},
             {"query": "deck next steps", "relevant": [{"path": "slides/deck.pptx", "page": 3}]}]
DEFAULT_MODEL, REVISION = "vidore/colpali-v1.3", "d" * 40  # build's default model, and a revision for its stand-in


def hub_cache_with(folder: Path, model_id: str, checkpoint: Path) -> None:
    """A Hugging Face cache in `folder` holding `checkpoint` as the hub's `model_id` (an offline stand-in)."""
    repo = folder / "hub" / f"models--{model_id.replace('/', '--')}"
    shutil.copytree(checkpoint, repo / "snapshots" / REVISION)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REVISION)


@pytest.fixture(scope="session")
def workplace(tiny_model, tmp_path_factory):
    """The working folder (also $HOME: `~/docs` is its docs/) and the environment; the default model, which a
    command without --model loads, is the tiny checkpoint under its hub id in a private offline cache. `lgpt-index`
    runs through a fork server (tests/forkserver.py) started in that environment: each command a process forked
    from one that imported torch and transformers once, instead of 5 s of imports a command."""
    base = tmp_path_factory.mktemp("doc-examples")
    path, bin_dir = base / "work", base / "bin"
    shutil.copytree(ROOT / "examples" / "docs", path / "docs")
    shutil.copy(path / "docs" / "reports" / "annual-report.pdf", path / "docs" / "reports" / "annual-report-copy.pdf")
    make_pdf(path / "docs" / "old.pdf", ["An old plan"])
    make_pdf(path / "docs" / "archive" / "2019-report.pdf", ["Revenue in 2019"])
    shutil.copytree(ROOT / "examples", path / "examples")
    (path / "questions.txt").write_text("what was Q3 revenue?\nhiring plan\n")
    (path / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    (path / "meta.json").write_text(json.dumps({"reports/*": {"team": "finance"}, "slides/*": {"team": "sales"}}))
    bin_dir.mkdir()
    (bin_dir / "lgpt-index").write_text(LAUNCHER.format(python=sys.executable, client=ROOT / "tests" / "forkserver.py"))
    (bin_dir / "lgpt-index").chmod(0o755)
    hub_cache_with(base / "hf-home", DEFAULT_MODEL, tiny_model)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "HOME": str(path),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HOME": str(base / "hf-home"), "XDG_CACHE_HOME": str(base / "cache"),
           "TOKEN": "doc-example-token", "NO_COLOR": "1"}
    for name in ("LGPT_INDEX_DIR", "LGPT_INDEX_NAME", "LGPT_STORE", "LGPT_SERVER", "LGPT_EXAMPLE_MODEL", "LGPT_EXAMPLE_DOCS",
                 "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        env.pop(name, None)
    env[SOCKET_ENV] = str(base / "forkserver.sock")
    forks = subprocess.Popen([sys.executable, str(ROOT / "tests" / "forkserver.py"), "--fork-server", env[SOCKET_ENV]], env=env,
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=(base / "forkserver.log").open("w"), text=True)
    try:  # (the server stopped whatever happens, a failed set-up too)
        assert forks.stdout.readline() == "ready\n", (base / "forkserver.log").read_text()
        for args in (["build", "docs"], ["build", "examples/eval/docs", "--name", "eval"],
                     ["export", "--format", "byaldi", ".byaldi/old-index"]):  # a byaldi index to import
            done = subprocess.run(["lgpt-index", *args], cwd=path, env=env, capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, done.stderr
        shutil.copytree(path, base / "pristine", symlinks=True)
        yield Workplace(path, base / "pristine", env)
    finally:
        forks.kill()
        forks.wait()


# `lgpt-index` on the examples' PATH: the fork server's client in this interpreter (where it cannot fork the
# command, the client runs `python -m localgpt_index` itself), its process id noted (stop_background stops those)
LAUNCHER = """#!/bin/sh
[ -n "$DOC_TEST_PIDS" ] && echo $$ >>"$DOC_TEST_PIDS"
exec {python} {client} "$@"
"""


PROLOGUE = textwrap.dedent("""\
    started() {  # started PID LOG [watch|PORT [PATH]]: it printed a line, and a watch's first build ended, or PORT answers
        # (PATH with 200: serve's /healthz, once its model is loaded)
        for _ in $(seq 3000); do
            if ! kill -0 "$1" 2>/dev/null; then return 0; fi
            case "${3:-}" in
                "") [ -s "$2" ] && return 0 ;;
                watch) grep -Eq 'up to date|[0-9]+ indexed|build-committed|build-failed' "$2" && return 0 ;;
                *) [ -s "$2" ] && curl -s -o /dev/null ${4:+-f} "http://127.0.0.1:$3/${4:-}" && return 0 ;;
            esac
            sleep 0.1
        done
        echo "doc-test: the background command did not start: $(tail -c 600 "$2")" >&2; return 1
    }
    stop_background() {  # Ctrl-C for what runs until Ctrl-C (SIGTERM: a background job ignores SIGINT); each must exit 0
        local status=$? failed=0
        if [ -n "${background[*]}" ] && [ -f "$DOC_TEST_PIDS" ]; then
            while read -r pid; do kill -TERM "$pid" 2>/dev/null || true; done <"$DOC_TEST_PIDS"
        fi
        for job in "${background[@]}"; do
            wait "$job" || { failed=$?; echo "doc-test: a background command exited $failed: $(tail -c 600 .doc-test/bg-*.log)" >&2; }
        done
        [ "$status" -ne 0 ] && exit "$status"; exit "$failed"
    }
    """)


def split_comment(line: str) -> tuple[str, str]:
    """A shell line's command and its trailing `# comment` (outside quotes)."""
    quote = ""
    for at, char in enumerate(line):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (at == 0 or line[at - 1].isspace()):
            return line[:at].rstrip(), line[at:]
    return line, ""


def shell_script(commands: list[tuple[int, str]], port: int) -> str:
    """The lines to run as one bash script, line for line (line n + 1 of the script is commands[n - 1])."""
    lines = []
    for number, text in commands:
        command, _ = split_comment(text)
        command = command.replace(SERVE_PORT, str(port)).replace(MCP_PORT, str(port))
        if LONG_RUNNING.search(command):
            if re.search(r"\blgpt-index\s+serve\b|\s--http\b", command) and "--port" not in command:
                command += f" --port {port}"
            check = " watch" if "--http" not in command else f" {port}"
            check = f" {port} healthz" if re.search(r"\blgpt-index\s+serve\b", command) else check
            log = f".doc-test/bg-{number}.log"
            command = f"{{ {command}; }} >{log} 2>&1 & background+=($!); started $! {log}{check}"
        elif re.search(r"\|\s*head\b", command):  # head closing the pipe early: the writer's 141 (SIGPIPE) is as meant
            command = f"{{ {command}; }} || [ $? -eq 141 ]"
        lines.append(command)
    head = (f"mkdir -p .doc-test; export DOC_TEST_PIDS=$PWD/.doc-test/pids; source {PROLOGUE_FILE}; background=(); "
            "set -eo pipefail; trap stop_background EXIT; ")
    return head + "trap 'echo \"doc-test: line $LINENO failed (exit $?): $BASH_COMMAND\" >&2' ERR\n" + "\n".join(lines) + "\n"


PROLOGUE_FILE = ".doc-test-prologue.sh"


@dataclass
class Outcome:
    where: str
    ran: bool
    ok: bool = True
    reason: str = ""  # why it was skipped, or how it failed (command, output tail)
    seconds: float = 0.0


def bounded(args: list[str], **options) -> subprocess.CompletedProcess:
    """`args` run to the end, or for UNIT_TIMEOUT_S (then exit 124, with what it printed until then)."""
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=UNIT_TIMEOUT_S, **options)
    except subprocess.TimeoutExpired as late:
        said = [(part.decode(errors="replace") if isinstance(part, bytes) else part or "") for part in (late.stdout, late.stderr)]
        return subprocess.CompletedProcess(args, 124, said[0], said[1] + f"\ndoc-test: still running after {UNIT_TIMEOUT_S} s")


UNIT_TIMEOUT_S = 600


def run_shell(block: Block, place: Workplace) -> list[Outcome]:
    units = [[command] for command in block.commands() if command[1].strip()] if block.marker == "lines" else [block.commands()]
    expected = int(block.marker.split()[1]) if block.marker.startswith("exits") else 0
    outcomes = []
    for unit in units:
        started = time.monotonic()
        place.restore()
        (place.path / PROLOGUE_FILE).write_text(PROLOGUE)
        done = bounded(["bash", "-c", shell_script(unit, free_port())], cwd=place.path, env=place.env, stdin=subprocess.DEVNULL)
        where = f"{block.page}:{unit[0][0]}" if len(units) > 1 else block.where
        seconds = round(time.monotonic() - started, 1)
        if done.returncode == expected:
            outcomes.append(Outcome(where, True, seconds=seconds))
            continue
        failed = re.findall(r"doc-test: line (\d+) failed", done.stderr)
        line = unit[int(failed[-1]) - 2] if failed and 0 <= int(failed[-1]) - 2 < len(unit) else unit[-1]
        output = (done.stdout + done.stderr)[-TAIL:]
        said = f"{block.page}:{line[0]}: exit {done.returncode} (expected {expected}) from\n    {line[1].strip()}\n"
        outcomes.append(Outcome(where, True, False, seconds=seconds, reason=said + textwrap.indent(output, "    | ")))
    return outcomes


DRIVER = textwrap.dedent("""\
    import json, sys
    namespace = {"__name__": "__main__"}
    for page, line, code in json.load(sys.stdin):
        print(f"doc-test: running {page}:{line}", file=sys.stderr, flush=True)
        exec(compile("\\n" * line + code, page, "exec"), namespace)
    """)


def run_python(page_blocks: list[Block], place: Workplace, restore: bool) -> Outcome:
    """Python blocks, in order, in one namespace, in a process of their own (a server for those that ask one)."""
    started = time.monotonic()
    if restore:
        place.restore()
    code = [(str(ROOT / block.page), block.line, block.code) for block in page_blocks]
    server = None
    if any(f"127.0.0.1:{SERVE_PORT}" in block.code for block in page_blocks):
        from served import Server

        server = Server(cwd=place.path, env=place.env)
        server.wait_ready()
        port = server.url.rsplit(":", 1)[1]
        code = [(path, line, text.replace(f"127.0.0.1:{SERVE_PORT}", f"127.0.0.1:{port}")) for path, line, text in code]
    try:
        done = bounded([sys.executable, "-c", DRIVER], input=json.dumps(code), cwd=place.path, env=place.env)
    finally:
        stopped = server.stop() if server else 0
    where, seconds = ", ".join(block.where for block in page_blocks), round(time.monotonic() - started, 1)
    if done.returncode == 0 and stopped == 0:
        return Outcome(where, True, seconds=seconds)
    output = (done.stdout + done.stderr + ("\n".join(server.lines) if server and stopped else ""))[-TAIL:]
    said = f"{where}: exit {done.returncode} (the server it asked: {stopped})\n"
    return Outcome(where, True, False, seconds=seconds, reason=said + textwrap.indent(output, "    | "))


def summary(outcomes: list[Outcome]) -> str:
    lines = [f"{'ran ' if o.ran else 'skip'} {'ok    ' if o.ok else 'FAILED'} {o.where}"
             + (f"  ({o.reason})" if not o.ran else f"  {o.seconds} s") for o in outcomes]
    return "\n".join(lines)


def test_a_failing_block_is_named_by_its_page_line_command_and_output(tmp_path):
    """The runner itself, on a block of its own: the failing line, its command and its output."""
    (tmp_path / "pristine").mkdir()
    place = Workplace(tmp_path / "work", tmp_path / "pristine", {**os.environ})
    place.path.mkdir()
    code = "echo first   # fine\ntrue\nls no-such-file   # fails\necho never\n"
    [outcome] = run_shell(Block("docs/x.md", 10, "bash", code, ""), place)
    assert not outcome.ok and outcome.where == "docs/x.md:10"
    assert outcome.reason.startswith("docs/x.md:13: exit 2 (expected 0) from\n    ls no-such-file   # fails\n"), outcome.reason
    assert "    | first" in outcome.reason and "no-such-file" in outcome.reason.split("\n", 2)[2]
    assert [o.ok for o in run_shell(Block("docs/x.md", 10, "console", "$ echo hi\nhi\n$ true\n", ""), place)] == [True]


def page_units(page_blocks: list[Block]) -> list[list[Block]]:
    """A page's blocks in the order they run: each shell block alone, consecutive Python blocks together."""
    units: list[list[Block]] = []
    for block in page_blocks:
        if block.skip:
            continue
        if block.kind == "python" and units and units[-1][0].kind == "python":
            units[-1].append(block)
        else:
            units.append([block])
    return units


@pytest.mark.slow  # LibreOffice, the tiny model in a process per command, servers on real ports: minutes a page
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("page", [str(page.relative_to(ROOT)) for page in pages()])
def test_every_doc_example_runs(page, workplace, tmp_path):
    """Each shell block from the folder as built; Python blocks from where the page's shell block before them left it.
    Prints what ran and what was skipped (and why), writes it to doc-examples.json, and asserts on that."""
    page_blocks = blocks(ROOT / page)
    outcomes: list[Outcome] = [Outcome(block.where, False, True, block.skip or "") for block in page_blocks if block.skip]
    fresh = True
    for unit in page_units(page_blocks):
        if unit[0].kind == "shell":
            outcomes.extend(run_shell(unit[0], workplace))
        else:
            outcomes.append(run_python(unit, workplace, restore=fresh))
        fresh = False
    print("\n" + summary(outcomes))
    (tmp_path / "doc-examples.json").write_text(json.dumps([o.__dict__ for o in outcomes], indent=1))
    written = json.loads((tmp_path / "doc-examples.json").read_text())
    ran = {where for o in written if o["ran"] for where in o["where"].split(", ")}
    assert [block.where for block in must_run() if block.page == page and block.where not in ran] == []
    failures = [o["reason"] for o in written if not o["ok"]]
    assert not failures, f"{len(failures)} doc example(s) failed:\n\n" + "\n\n".join(failures) + "\n\n" + summary(outcomes)
