"""The application object every command shares (on the Click context): the terminal and its
verbosity, JSON output, and the one error handler that turns errors into messages and exit codes."""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

import click

from ..errors import ExitCode, LgptError
from ..terminal import Terminal


class Application:
    def __init__(self) -> None:
        self.verbosity = 0  # -1 quiet, 0 normal, 1 verbose
        self.as_json = False
        self._terminal: Terminal | None = None
        self.store_url: str | None = None  # where the index is (index_options)
        self.qdrant_api_key: str | None = None
        self.pdf_store: str | None = None
        self.index_name: str | None = None
        self.index_dir: str | None = None
        self._opened: list = []

    def store(self):
        """The index's store, from --store, --index-dir/--name and friends (closed when the command ends)."""
        from ..stores import open_store

        return self.keep(open_store(self.store_url, self.index_dir, self.index_name, self.qdrant_api_key, self.pdf_store))

    def keep(self, store):
        self._opened.append(store)
        return store

    def close(self) -> None:
        """Stores with a connection (Qdrant) let it go: its in-process mode admits one client at a time."""
        for store in self._opened:
            close = getattr(store, "close", None)
            if close is not None:
                close()
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

    def fail(self, exc: LgptError) -> NoReturn:
        self.terminal.error(exc.message)
        if exc.hint:
            self.terminal.console.print(f"hint: {exc.hint}", markup=False)
        sys.exit(int(exc.exit_code))

    def internal_error(self, exc: Exception) -> NoReturn:
        """A bug of ours: one message asking for a report (the traceback with -v), exit 1."""
        import traceback

        if self.verbosity > 0:
            traceback.print_exception(exc, file=sys.stderr)
        what = " ".join(str(exc).split())[:500]
        self.terminal.error(f"internal error: {type(exc).__name__}{': ' + what if what else ''}. This is a bug in "
                            "lgpt-index; please report it with the command line (run it with -v for the traceback).")
        sys.exit(int(ExitCode.FAILURE))

    def interrupted(self) -> NoReturn:
        from .. import processes

        processes.stop_all()
        self.terminal.error("interrupted; the index keeps its last committed generation.")
        sys.exit(int(ExitCode.FAILURE))


class AppGroup(click.Group):
    """A group whose commands share one Application and one error handler."""

    def make_context(self, info_name, args, parent=None, **extra):
        extra.setdefault("obj", Application())
        return super().make_context(info_name, args, parent=parent, **extra)

    def invoke(self, ctx: click.Context):
        from .. import processes

        processes.terminate_as_interrupt()
        app: Application = ctx.obj
        try:
            return super().invoke(ctx)
        except LgptError as exc:
            app.fail(exc)
        except KeyboardInterrupt:
            app.interrupted()
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except Exception as exc:
            app.internal_error(exc)
        finally:
            app.close()


def _setter(attribute: str, value: Any):
    def callback(ctx: click.Context, param: click.Parameter, given: Any) -> None:
        if given:
            setattr(ctx.find_object(Application), attribute, value)

    return callback


def output_options(func):
    """-q, -v and --json: they configure the application, commands read them from it."""
    func = click.option("--json", "as_json", is_flag=True, expose_value=False, callback=_setter("as_json", True),
                        help="Print a JSON document on stdout.")(func)
    func = click.option("-v", "--verbose", is_flag=True, expose_value=False, callback=_setter("verbosity", 1),
                        help="Say more on stderr.")(func)
    func = click.option("-q", "--quiet", is_flag=True, expose_value=False, callback=_setter("verbosity", -1),
                        help="Only errors on stderr.")(func)
    return func
