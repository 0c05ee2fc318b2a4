"""The application object every command shares (on the Click context).

It holds the terminal and its verbosity, JSON output, and the one error handler that turns errors
into messages and exit codes (and, under --json, into the error document of schemas/error.schema.json
on stdout)."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any, NoReturn

import click

from ..core.config import ProjectConfig, find_config, find_index_dir
from ..core.errors import EnvironmentMissing, ExitCode, IndexBusy, IndexProblem, LgptError, UsageError
from ..core.terminal import Terminal
from .defaults import LocationOption, TuningOption, default_map, origin, rank

if TYPE_CHECKING:
    from ..index.protocols import Store

ERROR_SCHEMA_VERSION = 1
# The most specific class first: a subclass of IndexProblem is an index problem, and so on.
_KINDS = ((UsageError, "usage"), (EnvironmentMissing, "environment"), (IndexBusy, "busy"), (IndexProblem, "index"))


def error_kind(exc: LgptError) -> str:
    """The `kind` of an error document: usage, environment, busy, index or failure."""
    return next((kind for cls, kind in _KINDS if isinstance(exc, cls)), "failure")


def error_object(message: str, exit_code: int, kind: str, hint: str | None = None) -> dict:
    """The `error` object of every --json document that reports a failure (error.schema.json)."""
    return {"message": message, "hint": hint, "exit_code": int(exit_code), "kind": kind}


def error_document(message: str, exit_code: int, kind: str, hint: str | None = None) -> dict:
    """What a command prints under --json when it fails before it has a document of its own."""
    return {"version": ERROR_SCHEMA_VERSION, "error": error_object(message, exit_code, kind, hint)}


class Application:
    def __init__(self) -> None:
        self.verbosity = 0  # -1 quiet, 0 normal, 1 verbose
        self.as_json = False
        self.output_format: str | None = None  # --format (format_option); None: by where stdout goes
        self._terminal: Terminal | None = None
        self.config = ProjectConfig()  # the project's config file (AppGroup.make_context)
        self.store_url: str | None = None  # where the index is (index_options, on the group or the command)
        self.qdrant_api_key: str | None = None
        self.pdf_store: str | None = None
        self.index_name: str | None = None
        self.index_dir: str | None = None
        self.origins: dict[str, tuple[str, str | None]] = {}  # each of those: where its value came from (defaults.origin)
        self._ranks: dict[str, int] = {}
        self.argv: list[str] = []  # the command line, for --json before its callback ran (a parse error)
        self._opened: list[Store] = []
        self._printed_json = False
        self.processes: Any = None  # the command's ProcessScope (AppGroup.invoke): an interrupt stops it

    def locate(self, attribute: str, value: Any, ctx: click.Context, param: click.Parameter) -> None:
        """An index location option's value, from the group or the command: the more strongly given wins
        (defaults.rank), and of two alike the command's (it comes later)."""
        strength = rank(ctx.get_parameter_source(param.name) if param.name else None)
        if strength >= self._ranks.get(attribute, 0):
            setattr(self, attribute, value)
            self._ranks[attribute] = strength
            self.origins[attribute] = origin(ctx, param, self.config)

    def index_dir_found(self) -> tuple[str | None, tuple[str, str | None]]:
        """The folder of local indexes and where it came from: --index-dir (or its variable, or the config
        file), else the nearest .lgpt-index here or above (as git finds .git), else None (./.lgpt-index)."""
        if self.index_dir:
            return self.index_dir, self.origins.get("index_dir", ("option", None))
        found = find_index_dir()
        return (str(found), ("found", None)) if found is not None else (None, ("default", None))

    def store(self):
        """The index's store, from --store, --index-dir/--name and friends (closed when the command ends)."""
        from ..index.open import open_store

        index_dir = self.index_dir_found()[0]
        return self.keep(open_store(self.store_url, index_dir, self.index_name, self.qdrant_api_key, self.pdf_store))

    def keep(self, store: Store) -> Store:
        self._opened.append(store)
        return store

    def close(self) -> None:
        """Stores with a connection (Qdrant) let it go: its in-process mode admits one client at a time."""
        for store in self._opened:
            store.close()
        self._opened.clear()

    @property
    def terminal(self) -> Terminal:
        if self._terminal is None:
            self._terminal = Terminal(verbosity=self.verbosity)
        return self._terminal

    def print_json(self, data: Any) -> None:
        """JSON on stdout. ASCII escapes keep it valid whatever the file names hold (a name that
        is not UTF-8 comes out as \\udcXX escapes, which Python's json reads back to the same path)."""
        click.echo(json.dumps(data, indent=2, ensure_ascii=True, default=str))
        self._printed_json = True

    @property
    def wants_json(self) -> bool:
        """--json was given: parsed, or still on the command line when parsing failed before it."""
        argv = self.argv[: self.argv.index("--")] if "--" in self.argv else self.argv
        return self.as_json or "--json" in argv or "--format=json" in argv or ("--format", "json") in zip(argv, argv[1:])

    def print_error(self, message: str, exit_code: int, kind: str, hint: str | None = None) -> None:
        """Under --json, the error document on stdout, unless the command already printed its own."""
        if self.wants_json and not self._printed_json:
            self.print_json(error_document(message, exit_code, kind, hint))

    def fail(self, exc: LgptError) -> NoReturn:
        self.terminal.error(exc.message)
        if exc.hint:
            self.terminal.console.print(f"hint: {exc.hint}", markup=False)
        self.print_error(exc.message, exc.exit_code, error_kind(exc), exc.hint)
        sys.exit(int(exc.exit_code))

    def internal_error(self, exc: Exception) -> NoReturn:
        """A bug of ours: one message asking for a report (the traceback with -v), exit 1."""
        import traceback

        if self.verbosity > 0:
            traceback.print_exception(exc, file=sys.stderr)
        what = " ".join(str(exc).split())[:500]
        message = f"internal error: {type(exc).__name__}{': ' + what if what else ''}"
        self.terminal.error(f"{message}. This is a bug in lgpt-index; please report it with the command line "
                            "(run it with -v for the traceback).")
        self.print_error(message, ExitCode.FAILURE, "internal", "a bug in lgpt-index: please report it")
        sys.exit(int(ExitCode.FAILURE))

    def interrupted(self) -> NoReturn:
        if self.processes is not None:
            self.processes.stop()
        message = "interrupted; the index keeps its last committed generation."
        self.terminal.error(message)
        self.print_error(message, ExitCode.FAILURE, "interrupted")
        sys.exit(int(ExitCode.FAILURE))


class AppGroup(click.Group):
    """A group whose commands share one Application and one error handler; `lazy` names commands by
    "module:attribute", each imported when it is run or listed (a query imports no other command's module)."""

    def __init__(self, *args: Any, lazy: dict[str, str] | None = None, **kwargs: Any) -> None:
        self._lazy = dict(lazy or {})
        self._declared = list(self._lazy)
        super().__init__(*args, **kwargs)

    @property  # type: ignore[override]  # click.Group.commands, an attribute: read through this property
    def commands(self) -> dict[str, click.Command]:
        """Every command (the lazy ones imported now: --help, the config file's check, `config`), the lazy ones in the
        order they were declared whichever ran first (the command reference lists them so)."""
        for name in list(self._lazy):
            self._load(name)
        for name in self._declared:  # (in place: click adds commands to this very dict)
            self._commands[name] = self._commands.pop(name)
        return self._commands

    @commands.setter
    def commands(self, commands: dict[str, click.Command]) -> None:
        self._commands = commands

    def _load(self, name: str) -> None:
        from importlib import import_module

        module, attribute = self._lazy.pop(name).split(":")
        self._commands[name] = getattr(import_module(module), attribute)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self._lazy:
            self._load(cmd_name)
        return self._commands.get(cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self._commands, *self._lazy})

    def main(self, *args: Any, **kwargs: Any) -> Any:
        """Click's main; where the reader of stdout went away (click answers a write into it with exit 1,
        quietly, wherever it happened: --help, the last flush), the conventional status instead."""
        try:
            return super().main(*args, **kwargs)
        except SystemExit as exc:
            if exc.code == ExitCode.FAILURE and pipe_closed():
                end_on_closed_pipe()
            raise
        except BrokenPipeError:  # (a usage error Click shows on a closed stderr: past its own guard)
            if pipe_closed():
                end_on_closed_pipe()
            raise

    def make_context(self, info_name, args, parent=None, **extra):
        """The context, with the project's config file as Click's default map (defaults.py)."""
        app = extra.setdefault("obj", Application())
        app.argv = list(args)
        try:
            app.config = find_config()
            extra.setdefault("default_map", default_map(self, app.config))
        except LgptError as exc:
            app.fail(exc)
        return super().make_context(info_name, args, parent=parent, **extra)

    def invoke(self, ctx: click.Context):
        import warnings

        from ..ingest import processes

        processes.terminate_as_interrupt()
        # PIL's warning for a picture between its warning and error limits: it is indexed (resized at once)
        warnings.filterwarnings("ignore", message=r"Image size \(\d+ pixels\) exceeds limit", module=r"PIL\.")
        app: Application = ctx.obj
        app.processes = processes.ProcessScope()
        try:
            with app.processes.entered():
                return super().invoke(ctx)
        except LgptError as exc:
            app.fail(exc)
        except KeyboardInterrupt:
            app.interrupted()
        except BrokenPipeError as exc:  # `lgpt-index ... | head -1`: the reader went away
            if not pipe_closed():
                app.internal_error(exc)
            end_on_closed_pipe()
        except (click.exceptions.Exit, click.Abort):  # --help, ctx.exit(): not failures
            raise
        except click.ClickException as exc:  # a usage error: Click prints it and exits with its code
            app.print_error(exc.format_message(), exc.exit_code, "usage" if exc.exit_code == ExitCode.USAGE else "failure")
            raise
        except Exception as exc:  # a bug: one message (the traceback with -v), and under --json its document
            app.internal_error(exc)
        finally:
            app.close()


class AppCommand(click.Command):
    """A command whose --help keeps the everyday options apart from the tuning ones and the index's location."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        everyday: list[tuple[str, str]] = []
        tuning: list[tuple[str, str]] = []
        located: list[str] = []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None or not isinstance(param, click.Option):
                continue
            if isinstance(param, LocationOption):
                located.append(param.opts[0])
            else:
                (tuning if isinstance(param, TuningOption) else everyday).append(record)
        with formatter.section("Options"):
            formatter.write_dl(everyday)
        if located:
            with formatter.section("Index location"):
                formatter.write_text(f"{', '.join(located)}: here or before the command (lgpt-index --name work "
                                     f"{ctx.info_name} ...); see lgpt-index --help. Without them, the nearest .lgpt-index "
                                     "here or in a parent folder.")
        if tuning:
            with formatter.section("Tuning (also settable in lgpt-index.toml, see docs/configuration.md)"):
                formatter.write_dl(tuning)


CLOSED_PIPE = 128 + 13  # what a shell reports for a writer SIGPIPE ended (`yes | head -1` under pipefail)


def pipe_closed() -> bool:
    """Whether the reader of stdout, or of stderr (`verify 2>&1 >/dev/null | true`), went away."""
    return _closed(sys.stdout) or _closed(sys.stderr)


def end_on_closed_pipe() -> NoReturn:
    """Stop quietly, as a writer into `head` does: no message, the conventional status (141), and stdout (and a
    closed stderr) pointed at /dev/null so that Python's own flush at exit does not fail again."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    if _closed(sys.stderr):
        os.dup2(devnull, sys.stderr.fileno())
    sys.exit(CLOSED_PIPE)


def _closed(stream: Any) -> bool:
    """Whether `stream`'s reader went away: a pipe whose other end is closed polls as an error."""
    import select

    try:
        poller = select.poll()
        poller.register(stream.fileno(), select.POLLOUT)
        return any(event & select.POLLERR for _, event in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll (Windows), or the stream is no file
        return False


def _setter(attribute: str, value: Any):
    def callback(ctx: click.Context, param: click.Parameter, given: Any) -> None:
        if given:
            setattr(ctx.find_object(Application), attribute, value)

    return callback


def json_option(help: str = "Print a JSON document on stdout.") -> Any:
    """--json, read first (eager) so that an error in any other option is reported as JSON too."""
    return click.option("--json", "as_json", is_flag=True, expose_value=False, is_eager=True,
                        callback=_setter("as_json", True), help=help)


def output_options(func):
    """-q, -v and --json: they configure the application, commands read them from it."""
    func = json_option()(func)
    func = click.option("-v", "--verbose", is_flag=True, expose_value=False, callback=_setter("verbosity", 1),
                        help="Say more on stderr.")(func)
    func = click.option("-q", "--quiet", is_flag=True, expose_value=False, callback=_setter("verbosity", -1),
                        help="Only errors on stderr.")(func)
    return func
