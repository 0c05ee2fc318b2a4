"""The `lgpt-index` command: a thin Click layer over the library.

Each command lives in its own module, imported when it runs (COMMANDS), and imports heavy things
(torch, byaldi) inside its body, so `--help` answers at once and a query asked of a warm service
imports little more than Click (serve/warm.py).
"""

from __future__ import annotations

import gc

import click

from .._version import __version__
from ..core.collector import own_process
from .app import AppGroup
from .options import EXIT_CODES, index_options


# each command's module and name in it: imported when the command runs, or when all are listed
COMMANDS = {name: f"localgpt_index.cli.{module}:{attribute}" for name, module, attribute in (
    ("build", "build", "build"), ("query", "query", "query"), ("serve", "serve", "serve"), ("mcp", "mcp", "mcp"),
    ("status", "status", "status"), ("ls", "ls", "ls"), ("remove", "remove", "remove"), ("verify", "verify", "verify"),
    ("doctor", "doctor", "doctor"), ("export", "transfer", "export"), ("import", "transfer", "import_"),
    ("eval", "eval", "eval_"), ("watch", "watch", "watch"), ("upgrade", "upgrade", "upgrade"), ("config", "config", "config"),
    ("warm", "warm", "warm"))}


@click.group(cls=AppGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]}, epilog=EXIT_CODES)
@click.version_option(__version__, prog_name="lgpt-index")
@index_options
def main() -> None:
    """Index folders of documents for visual retrieval with ColPali-family models.

    \b
      lgpt-index build ./docs                 index (or update the index of) a folder
      lgpt-index query "what was Q3 revenue?" the pages that answer best
      lgpt-index serve                        answer queries over HTTP, the model loaded once
      lgpt-index mcp                          the same for MCP clients (desktop agents), over stdio
      lgpt-index watch ./docs                 keep the index up to date as files change
      lgpt-index warm                         keep the model loaded for repeated queries (--stop, --status)
      lgpt-index status                       what the index holds
      lgpt-index ls [PREFIX]                  the documents it holds
      lgpt-index remove PATH...               drop documents from the index
      lgpt-index verify                       check the index, every checksum
      lgpt-index upgrade                      write what an older version's index lacks (binary codes)
      lgpt-index eval QUERIES                 measure the answers: nDCG, recall, MRR
      lgpt-index doctor [--model M]           what this machine has and lacks
      lgpt-index export|import --format byaldi   trade indexes with byaldi
      lgpt-index config                       the settings in effect, and where each came from

    The index is the nearest .lgpt-index here or in a parent folder (as git finds .git), unless
    --index-dir or $LGPT_INDEX_DIR says; the index location options are taken here, before the
    command, or by the command. Defaults for every option: lgpt-index.toml (docs/configuration.md).
    """


def run() -> None:
    """The console command (and `python -m localgpt_index`): `main`, with the collector paused while
    a model loads (core/collector.py), then an exit without the garbage collector's last passes."""
    own_process()
    try:
        main(prog_name="lgpt-index")
    finally:
        # torch, transformers and colpali-engine leave over a million objects behind: the
        # collector's passes over them at interpreter exit took 1.2 to 1.4 s after every build or
        # query on this project's 2-core machine. Frozen, they are skipped; reference counting
        # still closes what is open, and atexit handlers still run.
        gc.freeze()

