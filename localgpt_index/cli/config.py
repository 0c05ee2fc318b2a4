"""lgpt-index config"""

from __future__ import annotations

from typing import Any

import click

from .app import AppCommand, Application, output_options
from .defaults import SECRETS, origin, settable
from .options import display_path

CONFIG_SCHEMA_VERSION = 1
# the group's options whose value the application keeps (Application.locate), by key
LOCATED = {"index-dir": "index_dir", "name": "index_name", "store": "store_url", "pdf-store": "pdf_store",
           "qdrant-api-key": "qdrant_api_key"}


@click.command(cls=AppCommand)
@click.argument("command", required=False, metavar="[COMMAND]")
@output_options
@click.pass_context
def config(ctx: click.Context, command: str | None) -> None:
    """Show the settings in effect and where each came from: an option, an environment variable,
    the config file (lgpt-index.toml, or [tool.lgpt-index] in pyproject.toml, here or in a parent
    folder), or the built-in default. Without COMMAND: where the index is, and what the config file
    and LGPT_MODEL set; with COMMAND: every option of that command."""
    from ..core.errors import UsageError

    app: Application = ctx.obj
    group = ctx.parent
    assert group is not None and isinstance(group.command, click.Group)
    commands = group.command.commands
    if command is not None and command not in commands:
        raise UsageError(f"config {command}: no such command; one of {', '.join(sorted(commands))}.")
    settings = _located(app)
    if command is None:
        keys = set(app.config.settings) | {"model"}
        for name in sorted(commands):
            settings |= {key: entry for key, entry in _settings(group, commands[name]).items()
                         if key in keys and key not in settings}
    else:
        settings = _settings(group, commands[command]) | {key: settings[key] for key in settings
                                                           if key in settable(commands[command])}
    settings = dict(sorted(settings.items()))
    path = str(app.config.path) if app.config.path else None
    if app.as_json:
        app.print_json({"version": CONFIG_SCHEMA_VERSION, "config_file": path, "command": command, "settings": settings})
        return
    click.echo(f"config file  {display_path(path or '(none found here or in a parent folder)')}")
    width = max((len(key) for key in settings), default=0)
    for key, entry in settings.items():
        where = entry["source"] + (f" {entry['from']}" if entry["from"] else "")
        click.echo(f"{key:<{width}}  {_shown(entry['value'])}  ({display_path(where)})")


def _located(app: Application) -> dict[str, dict]:
    """The index location options as the command sees them (the group's or the command's), the index
    folder as found when none names it."""
    found = {}
    for key, attribute in LOCATED.items():
        value = getattr(app, attribute)
        source, where = app.origins.get(attribute, ("default", None))
        if key == "index-dir":
            value, (source, where) = app.index_dir_found()
            value = value or ".lgpt-index"
        found[key] = _entry(key, value, source, where)
    return found


def _settings(group: click.Context, command: click.Command) -> dict[str, dict]:
    """Every option of `command` a config file may set, as a run without options would take it."""
    from click.core import UNSET

    ctx = click.Context(command, parent=group, info_name=command.name)
    found = {}
    for key, option in settable(command).items():
        if key in LOCATED or not option.expose_value:
            continue
        value, source = option.consume_value(ctx, {})
        ctx.set_parameter_source(option.name or key, source)
        kind, where = origin(ctx, option, group.obj.config)
        found[key] = _entry(key, None if value is UNSET else value, kind, where)
    return found


def _entry(key: str, value: Any, source: str, where: str | None) -> dict:
    if key in SECRETS and value:
        value = "(set)"
    if isinstance(value, tuple):
        value = list(value)
    return {"value": value, "source": source, "from": where}


def _shown(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return "[" + ", ".join(display_path(str(item)) for item in value) + "]"
    return display_path(str(value))
