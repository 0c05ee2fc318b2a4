"""CSV and TSV files: converted as spreadsheets by LibreOffice Calc, their cells found in text mode (issue 42)."""

from __future__ import annotations

import json
import os

import pytest

from conftest import run_cli

pytestmark = pytest.mark.slow  # real LibreOffice: the real-component tier


def test_a_csv_and_a_tsv_in_a_team_folder_are_indexed_and_their_cells_found_in_text_mode(fake_model, tmp_path):
    team = tmp_path / "team"
    (team / "sales").mkdir(parents=True)
    (team / "contacts.csv").write_text('name,email,city\nAda Lovelace,ada@example.org,London\n"Hopper, Grace",grace@navy.mil,Arlington\n'
                                       "Zoë Ülm,zoe@example.de,Köln\n", "utf-8")
    # a tab between the cells: read with the comma filter, "orgWilmslow" would be one word and Wilmslow never found
    (team / "sales" / "people.tsv").write_text("name\temail\tcity\nAlan Turing\talan@example.org\tWilmslow\n", "utf-8")
    index = ["--index-dir", str(tmp_path / "idx")]
    built = run_cli("build", str(team), "--model", str(fake_model), "--json", *index)
    assert built.exit_code == 0, built.stderr
    report = json.loads(built.stdout)
    assert report["indexed"] == 2 and report["failed"] == 0 and report["skipped"] == 0, report
    for words, name in [("Lovelace", "contacts.csv"), ("Köln", "contacts.csv"), ("Wilmslow", "people.tsv")]:
        answered = run_cli("query", words, "--mode", "text", "--json", *index)
        assert answered.exit_code == 0, answered.stderr
        hits = json.loads(answered.stdout)["queries"][0]["results"]
        assert [os.path.basename(hit["path"]) for hit in hits] == [name], (words, hits)
