"""`python -m localgpt_index` is `lgpt-index`."""

from .cli import run

run()
