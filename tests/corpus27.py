"""The issue 27 corpus: 40 documents of the four kinds users have, 40 planted facts (10 per kind),
a paraphrased question for each, and distractors: every fact's template also appears in other
documents with a near-miss code (the last two digits swapped), another name, another place.

    python tests/corpus27.py OUT      # writes OUT/docs/... and OUT/queries.jsonl

Deterministic (random.Random(27); PDFs in reportlab's invariant mode, zips with fixed times). The
kinds, and the pages only OCR can read kept few (the slow tier's time is mostly OCR):

- text-layer: 18 reportlab PDFs (1 to 3 pages; 8 hold facts, the others only distractors),
- scanned: 6 one-page image-only PDFs (scripts/make_eval_set.py's scanner: 200 dpi, grey, skewed, specks),
- office: 6 .docx and 4 .pptx (LibreOffice converts them at build time),
- image: 6 PNGs (whiteboards and notices: colour, large text).
"""

from __future__ import annotations

import importlib.util
import io
import json
import random
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CATEGORIES = ("text-layer", "scanned", "office", "image")

# (statement, question that paraphrases it, how the code is made): {code} {name} {place} {num} {date}
TEMPLATES = (
    ("Technician {name} replaced the check valve at pump station {code} on {date}.",
     "Who repaired the valve of pump station {code}?", "P-{d3}"),
    ("Invoice {code} totals EUR {num}.00 and is payable by {date}.",
     "What amount is owed on invoice {code}?", "INV-{d5}"),
    ("Shipment {code} left the {place} warehouse with {num} pallets of fittings.",
     "How many pallets were loaded in shipment {code}?", "SH-{d4}"),
    ("{name} was appointed head of the {place} office on {date}.",
     "Who runs the {place} office now?", "{place}"),
    ("Product {code} weighs {num} kg and ships in a blue crate.",
     "How heavy is product {code}?", "ZX-{d4}"),
    ("The {place} plant produced {num} tonnes of cement in spring.",
     "How much cement came out of the {place} plant?", "{place}"),
    ("Contract {code} with {name} ends on {date}.",
     "When does contract {code} expire?", "CT-{d4}"),
    ("Meeting room {code} on the {place} campus seats {num} people.",
     "How many people fit in meeting room {code}?", "R-{d3}"),
)
FIRST = ("Halima", "Maribel", "Tomasz", "Ingrid", "Dagny", "Anselm", "Brigid", "Cosmin", "Delphine", "Eero", "Fiorella",
         "Gunnar", "Hesper", "Idris", "Jolanta", "Kasimir", "Leocadia", "Mathis", "Nkechi", "Oskar", "Priya", "Quentin",
         "Rasmus", "Solveig", "Tadeo", "Ulrike", "Vesna", "Wendell", "Ximena", "Yusuf", "Zdenka", "Aurelio")
LAST = ("Rudd", "Okonkwo", "Wieczorek", "Solberg", "Whitcombe", "Varga", "Lindqvist", "Abernethy", "Moreau", "Tanaka",
        "Ferreira", "Haugen", "Kowalczyk", "Nakamura", "Oyelaran", "Petrov", "Quist", "Rahman", "Sandoval", "Thorsen")
PLACES = ("Tromso", "Dunmore", "Bergen", "Kestrel", "Lisbon", "Gdansk", "Porto", "Tampere", "Galway", "Utrecht", "Brno",
          "Aarhus", "Bilbao", "Graz", "Lyon", "Malmo", "Narvik", "Oulu", "Riga", "Split", "Turku", "Varna", "Zadar", "Kiruna")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November",
          "December")
FILLER = ("This page is part of the regular records of the operations department.",
          "Figures are checked by the finance team every quarter.",
          "Questions about this document go to the office of the director.",
          "All amounts are in EUR unless stated otherwise.",
          "The maintenance team reviews pump stations, valves and contracts each spring.",
          "Shipments and invoices are filed by number in the archive.",
          "Meeting rooms are booked through the facilities desk.",
          "Product weights include packaging.")


@dataclass(frozen=True)
class Fact:
    id: str
    category: str
    statement: str
    question: str
    distractor: str  # the same template with a near-miss code and other values: for other documents


@dataclass
class Doc:
    path: str  # under docs/
    kind: str  # pdf, scan, docx, pptx, png
    category: str
    pages: list[list[str]] = field(default_factory=list)  # lines of each page; the first is the title


def _code(pattern: str, rng: random.Random, place: str) -> str:
    digits = {f"d{n}": "".join(str(rng.randrange(1, 10)) for _ in range(n)) for n in (3, 4, 5)}
    return pattern.format(place=place, **digits)


def _near(code: str) -> str:
    """A near miss: the last two digits swapped (P-742 -> P-724), or the digit before last changed."""
    swapped = code[:-2] + code[-1] + code[-2]
    return swapped if swapped != code else code[:-2] + str((int(code[-2]) % 9) + 1) + code[-1]


def _fill(template: str, rng: random.Random, code: str, place: str) -> str:
    return template.format(code=code, place=place, name=f"{rng.choice(FIRST)} {rng.choice(LAST)}",
                           num=f"{rng.randrange(12, 990)}", date=f"{rng.randrange(1, 29)} {rng.choice(MONTHS)} 2025")


def make_facts(rng: random.Random) -> list[Fact]:
    facts, places = [], list(PLACES)
    rng.shuffle(places)
    for number in range(40):
        category = CATEGORIES[number // 10]
        statement, question, pattern = TEMPLATES[number % len(TEMPLATES)]
        place = places.pop() if "{place}" in pattern else rng.choice(PLACES)
        code = _code(pattern, rng, place)
        other = _near(code) if "{place}" not in pattern else rng.choice([p for p in PLACES if p != place])
        facts.append(Fact(f"{category}-{number % 10:02d}", category, _fill(statement, rng, code, place),
                          question.format(code=code, place=place),
                          _fill(statement, rng, other, rng.choice(PLACES) if "{place}" not in pattern else other)))
    return facts


def make_docs(facts: list[Fact], rng: random.Random) -> tuple[list[Doc], dict[str, tuple[str, int]]]:
    """The documents, and where each fact is: {fact id: (path, page)}."""
    docs = [Doc(f"reports/report-{n:02d}.pdf", "pdf", "text-layer") for n in range(18)] + \
           [Doc(f"scans/scan-{n:02d}.pdf", "scan", "scanned") for n in range(6)] + \
           [Doc(f"office/memo-{n:02d}.docx", "docx", "office") for n in range(6)] + \
           [Doc(f"office/slides-{n:02d}.pptx", "pptx", "office") for n in range(4)] + \
           [Doc(f"images/board-{n:02d}.png", "png", "image") for n in range(6)]
    for doc in docs:
        pages = 1 if doc.kind in ("scan", "png") else 1 + rng.randrange(3 if doc.kind == "pdf" else 2)
        doc.pages = [[f"{doc.path.split('/')[-1].split('.')[0].replace('-', ' ').title()} - page {n + 1}"] for n in range(pages)]
    where: dict[str, tuple[str, int]] = {}
    holders = {c: [d for d in docs if d.category == c] for c in CATEGORIES}
    holders["text-layer"] = holders["text-layer"][:8]  # the other ten text PDFs hold distractors only
    for number, fact in enumerate(facts):
        own = holders[fact.category]
        doc = own[number % len(own)]
        page = rng.randrange(len(doc.pages))
        doc.pages[page].append(fact.statement)
        where[fact.id] = (doc.path, page + 1)
        elsewhere = rng.choice([d for d in docs if d is not doc])  # the near miss, in another document
        elsewhere.pages[rng.randrange(len(elsewhere.pages))].append(fact.distractor)
    for doc in docs:
        for lines in doc.pages:
            lines[1:1] = [rng.choice(FILLER)]
            if doc.kind not in ("scan", "png"):
                lines.append(rng.choice(FILLER))
    return docs, where


def _eval_set_module():
    spec = importlib.util.spec_from_file_location("make_eval_set", ROOT / "scripts" / "make_eval_set.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("make_eval_set", module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def write_pptx(path: Path, pages: list[list[str]], fixed_zip) -> None:
    import datetime

    from pptx import Presentation
    from pptx.util import Inches, Pt

    deck = Presentation()
    for lines in pages:
        slide = deck.slides.add_slide(deck.slide_layouts[5])  # title only
        slide.shapes.title.text = lines[0]
        box = slide.shapes.add_textbox(Inches(0.5), Inches(1.6), Inches(9), Inches(5)).text_frame
        box.word_wrap = True
        for number, line in enumerate(lines[1:]):
            paragraph = box.paragraphs[0] if number == 0 else box.add_paragraph()
            paragraph.text = line
            paragraph.font.size = Pt(18)
    props = deck.core_properties
    props.author = props.last_modified_by = "lgpt-index"
    props.created = props.modified = datetime.datetime(2025, 1, 1)
    props.revision = 1
    buffer = io.BytesIO()
    deck.save(buffer)
    fixed_zip(buffer.getvalue(), path)


def write_png(path: Path, lines: list[str], seed: int) -> None:
    """A whiteboard or notice photographed: colour, large text, marker smudges."""
    from PIL import Image, ImageDraw, ImageFont

    rng = random.Random(seed)
    image = Image.new("RGB", (1600, 1200), (236, 238, 232) if seed % 2 else (250, 246, 226))
    draw = ImageDraw.Draw(image)
    draw.text((90, 70), lines[0], font=ImageFont.load_default(size=60), fill=(20, 20, 20))
    body, y = ImageFont.load_default(size=40), 180
    ink = [(20, 40, 120), (150, 20, 30), (20, 90, 40)]
    for number, line in enumerate(lines[1:]):
        for part in textwrap.wrap(line, 58):
            draw.text((90, y), part, font=body, fill=ink[number % 3])
            y += 58
        y += 14
    for _ in range(5):
        x = rng.randrange(1200, 1550)
        draw.rectangle((x, 1050, x + rng.randrange(4, 18), 1150), fill=(200, 205, 200))
    image.save(path, optimize=True)


def write(out: Path) -> list[dict]:
    """Write the corpus under OUT/docs and its questions to OUT/queries.jsonl; return the questions."""
    rng = random.Random(27)
    facts = make_facts(rng)
    docs, where = make_docs(facts, rng)
    tools = _eval_set_module()
    for seed, doc in enumerate(docs):
        path = out / "docs" / doc.path
        path.parent.mkdir(parents=True, exist_ok=True)
        pages = tuple(tuple(lines) for lines in doc.pages)
        if doc.kind == "pdf":
            tools.write_text_pdf(path, pages)
        elif doc.kind == "scan":
            tools.write_scan_pdf(path, pages, seed * 100)
        elif doc.kind == "docx":
            tools.write_docx(path, pages)
        elif doc.kind == "pptx":
            write_pptx(path, doc.pages, tools._fixed_zip)
        else:
            write_png(path, doc.pages[0], seed)
    queries = [{"id": fact.id, "category": fact.category, "query": fact.question,
                "relevant": [{"path": f"docs/{where[fact.id][0]}", "page": where[fact.id][1], "grade": 1}]}
               for fact in facts]
    (out / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    return queries


if __name__ == "__main__":
    print(len(write(Path(sys.argv[1]))), "questions")
