"""The config file as Click's default map: its keys checked against the options, its paths made relative to it.

A key is an option's long name (`model`, `commit-every`): at the top level it sets every command that
has the option, in a command's table (`[query]`) that command's alone, which wins. Click then ranks
them: an option given > its environment variable > the config file > the built-in default.
"""

from __future__ import annotations

import difflib
import os
from typing import Any

import click
from click.core import ParameterSource

from ..core.config import ProjectConfig
from ..core.errors import UsageError

# Options a config file does not set: they say what this one run does, not how a project works
NOT_SETTINGS = frozenset({"version", "help"})
SECRETS = frozenset({"qdrant-api-key", "token"})


class TuningOption(click.Option):
    """An option most runs leave alone (a timeout, a worker count): --help lists it under Tuning."""


class OwnOption(click.Option):
    """An option whose meaning is its command's own (import's --model, export's --format): a config file
    sets it in that command's table only, never from a top-level key of its name."""


class LocationOption(click.Option):
    """Where the index is (index_options): --help names these in one line, they are the group's too."""


def settable(command: click.Command, top_level: bool = False) -> dict[str, click.Option]:
    """The options of `command` a config file may set, by key: the long name without its dashes (a short
    one's letter where it has none: k for -k);
    `top_level`: those a top-level key sets (not an OwnOption)."""
    found: dict[str, click.Option] = {}
    for param in command.params:
        if isinstance(param, click.Option) and param.name not in NOT_SETTINGS and not (top_level and isinstance(param, OwnOption)):
            long = [opt[2:] for opt in param.opts if opt.startswith("--")]
            found.update(dict.fromkeys(long or [opt.lstrip("-") for opt in param.opts], param))  # -k: k
    return found


def default_map(group: click.Group, config: ProjectConfig) -> dict[str, Any]:
    """Click's default map of `group` and its commands from `config`; an unknown key or a value its option
    refuses is a usage error naming the file, the key, and the nearest option."""
    if config.path is None:
        return {}
    commands = {name: settable(command) for name, command in group.commands.items()}
    shared = {name: settable(command, top_level=True) for name, command in group.commands.items()}
    own = settable(group)
    everywhere = set(own).union(*shared.values())
    for key in config.settings:
        if key not in everywhere:
            raise _unknown(config, key, key, everywhere)
    for name, table in config.commands.items():
        if name not in commands:
            raise _unknown(config, f"[{name}]", name, commands, "no such command")
        for key in table:
            if key not in commands[name]:
                raise _unknown(config, f"{name}.{key}", key, commands[name], f"no option --{key} of `{name}`")
    result: dict[str, Any] = {own[key].name: _value(config, key, own[key], value)
                              for key, value in config.settings.items() if key in own}
    for name, options in commands.items():
        given = {key: value for key, value in config.settings.items() if key in shared[name]} | config.commands.get(name, {})
        if given:
            result[name] = {options[key].name: _value(config, f"{name}.{key}", options[key], value) for key, value in given.items()}
    return result


def _unknown(config: ProjectConfig, shown: str, key: str, known, why: str | None = None) -> UsageError:
    near = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.5)
    return UsageError(f"{config.path}: {shown}: {why or 'no option of that name'}"
                      f"{f'; did you mean {near[0]!r}?' if near else '.'}",
                      hint="Keys are long options without their dashes (model, store, exclude, commit-every); "
                           "a table per command ([query]) for that command's own. See docs/configuration.md.")


def _value(config: ProjectConfig, key: str, option: click.Option, value: Any) -> Any:
    """`value` as the option takes it, checked now (so that the error names the file); a relative path
    is relative to the config file's folder."""
    if isinstance(option.type, click.Path) and isinstance(value, str):
        value = os.path.join(config.folder, os.path.expanduser(value))
    try:
        option.type_cast_value(click.Context(click.Command(key)), value)
    except click.BadParameter as exc:
        raise UsageError(f"{config.path}: {key} = {value!r}: {exc.format_message()}") from None
    return value


def origin(ctx: click.Context, param: click.Parameter, config: ProjectConfig) -> tuple[str, str | None]:
    """Where `param`'s value came from in `ctx`: option, env (and its variable), file (and its path) or default."""
    source = ctx.get_parameter_source(param.name) if param.name else None
    if source == ParameterSource.COMMANDLINE:
        return "option", None
    if source == ParameterSource.ENVIRONMENT:
        return "env", param.envvar if isinstance(param.envvar, str) else None
    if source == ParameterSource.DEFAULT_MAP:
        return "file", str(config.path)
    return "default", None


RANK = {ParameterSource.COMMANDLINE: 3, ParameterSource.ENVIRONMENT: 2, ParameterSource.DEFAULT_MAP: 1}


def rank(source: ParameterSource | None) -> int:
    """How strongly a value was given: an option over its variable over the config file over a default."""
    return RANK.get(source, 0) if source is not None else 0
