#!/usr/bin/env python3
"""Write the bundled evaluation set, examples/eval: documents with planted facts, and the queries that
ask for them (paraphrased), in lgpt-index's JSONL format and in BEIR's layout.

    python scripts/make_eval_set.py [OUT]      # default: examples/eval (the committed copy)

Deterministic: the same Pillow, reportlab and python-docx write the same bytes every run (PDFs with
reportlab's invariant mode, the .docx zip with fixed times and properties). The kinds a user has:

- text-layer PDFs (reportlab text),
- scanned pages: image-only PDFs (a 200 dpi grey picture of a page, slightly skewed, no text layer:
  only OCR reads them),
- office documents (.docx, converted by LibreOffice when the index is built),
- pictures (PNG).

Every fact is planted in one place, and the other documents hold distractors: near-miss numbers
(INV-20471 beside INV-20417, VX-424 beside VX-442, ZX-9301 beside ZX-9310-B) and the same vocabulary
(invoice, valve, leave, Kestrel), so that a query has to find the right page, not the right topic.
"""

from __future__ import annotations

import io
import json
import random
import sys
import textwrap
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Doc:
    path: str  # under docs/
    kind: str  # pdf (text layer), scan (image-only PDF), docx, png
    pages: tuple[tuple[str, ...], ...]  # lines of each page; the first line is the title


DOCS = [
    Doc("invoices/halvorsen-INV-20417.pdf", "pdf", (
        ("INVOICE INV-20417", "Halvorsen Marine Supply AS, Strandkaien 12, Bergen", "Invoice date: 12 February 2025",
         "Bill to: Brightwater Logistics Ltd, 4 Dock Road, Dundee", "", "Mooring rope, 40 m, 6 pieces: EUR 3,840.00",
         "Bilge pump BP-220, 2 pieces: EUR 14,800.50", "Total due: EUR 18,640.50", "Payment due by 14 March 2025",
         "", "Halvorsen Marine Supply AS - INV-20417 - page 1 of 2"),
        ("Payment terms", "Payments received after the due date accrue interest of 1.5 percent per month.",
         "Bank: Fjordbank, IBAN NO93 8601 1117 947, quote INV-20417 with every transfer.",
         "Goods remain our property until paid in full.", "",
         "Halvorsen Marine Supply AS - INV-20417 - page 2 of 2"),
    )),
    Doc("invoices/carrow-INV-20471.pdf", "pdf", (
        ("INVOICE INV-20471", "Carrow Office Furniture Ltd, Leeds", "Invoice date: 3 March 2025",
         "Bill to: Brightwater Logistics Ltd, 4 Dock Road, Dundee", "", "Standing desk, 12 pieces: EUR 9,212.00",
         "Total due: EUR 9,212.00", "Payment due by 2 April 2025",
         "Late payments accrue interest of 2 percent per month.", "", "Carrow Office Furniture - INV-20471"),
    )),
    Doc("reports/lake-orrin-field-report.pdf", "pdf", (
        ("Field report: Lake Orrin water district", "Spring inspection of the district's seven pump stations.",
         "Six stations passed every test. One pump station needed a repair on site; see page 2.",
         "Inspector in charge: Halima Rudd.", "", "Lake Orrin water district - field report - page 1"),
        ("Pump station P-7", "Pump station P-7 failed its pressure test on 3 June 2024.",
         "Technician Maribel Okonkwo replaced the check valve with a new one, model VX-442.",
         "The station passed a retest on 4 June 2024 and is back in service.", "",
         "Lake Orrin water district - field report - page 2"),
        ("Costs and next steps", "Inspection costs: 48,300 for labour, 6,150 for parts.",
         "The autumn inspection is scheduled for October 2024.", "",
         "Lake Orrin water district - field report - page 3"),
    )),
    Doc("reports/quarterly-operations.pdf", "pdf", (
        ("Quarterly operations review", "Pump stations in the northern region ran 99.2 percent of the quarter.",
         "Pressure tests are due every spring; valves of model VX-424 are kept in stock.",
         "Technician Mario Okoye leads the northern maintenance team.", "", "Operations review - page 1"),
        ("Staffing and budget", "Two technicians joined the maintenance team in July.",
         "The maintenance budget for the year is 410,000.", "", "Operations review - page 2"),
    )),
    Doc("scans/lease-kestrel-street.pdf", "scan", (
        ("RESIDENTIAL LEASE AGREEMENT", "Premises: Unit 14B, 27 Kestrel Street, Dunmore",
         "Landlord: Orchard Row Properties Ltd", "Tenant: Dagny Whitcombe",
         "Term: 1 September 2024 to 31 August 2025",
         "Monthly rent: 2,350.00, payable on the first day of each month", "Deposit: 4,700.00",
         "Pets are not allowed without written consent.", "", "Signed: D. Whitcombe    Orchard Row Properties"),
    )),
    Doc("scans/delivery-note-DN-5531.pdf", "scan", (
        ("DELIVERY NOTE DN-5531", "Carrier: Tamsin Freight", "Deliver to: Unit 4, Kestrel Industrial Park",
         "Contents: 12 pallets of check valves, model VX-440", "Delivered: 18 November 2024",
         "Received by: J. Abernethy", "", "Please report damage within 48 hours."),
    )),
    Doc("office/leave-policy.docx", "docx", (
        ("Annual leave policy", "Employees may carry over at most 7 days of unused vacation into the next calendar year.",
         "Requests to carry over vacation days go to Ingrid Solberg in People Operations before 1 December.",
         "Vacation days not carried over lapse at the end of the year."),
        ("Parental leave", "Parents receive 26 weeks of paid parental leave, which may be shared between both parents.",
         "Parental leave can start up to four weeks before the expected birth."),
    )),
    Doc("office/team-handbook.docx", "docx", (
        ("Team handbook", "The holiday rota is kept in the shared calendar.",
         "Sick leave: tell your manager before 9:00 on the first day.",
         "Overtime hours may be carried over up to 20 hours a quarter.",
         "Equipment requests go to the facilities desk."),
    )),
    Doc("images/whiteboard-sprint-42.png", "png", (
        ("Sprint 42 goals", "Move the billing database to PostgreSQL 16", "Owner: Tomasz Wieczorek",
         "Retire the old invoice exporter", "Demo on 28 February"),
    )),
    Doc("images/label-ZX-9310-B.png", "png", (
        ("Norrland Tools", "Cordless drill 18 V", "Product code: ZX-9310-B", "Batch: 77812", "Made in Sweden"),
    )),
    Doc("catalog/norrland-tools-catalog.pdf", "pdf", (
        ("Norrland Tools catalogue: drills and drivers", "ZX-9301 impact driver 18 V, one battery: 129.00",
         "ZX-9310-B cordless drill 18 V, two batteries and case: 149.00", "ZX-9130 angle grinder 125 mm: 89.00",
         "All prices in EUR, excluding delivery.", "", "Norrland Tools catalogue - page 1"),
        ("Saws", "ZS-4410 circular saw 190 mm: 179.00", "ZS-4420 jigsaw with three blades: 99.00", "",
         "Norrland Tools catalogue - page 2"),
    )),
]

# (id, category, question, [(path, page, grade)]): grade 2 the page that answers, 1 a page that helps
QUERIES = [
    ("invoice-billed", "text-layer", "Which company was billed on invoice INV-20417?",
     [("invoices/halvorsen-INV-20417.pdf", 1, 2)]),
    ("invoice-late", "text-layer", "How much interest is charged when the Halvorsen Marine bill is paid late?",
     [("invoices/halvorsen-INV-20417.pdf", 2, 2)]),
    ("invoice-due", "text-layer", "By what date must the mooring rope and bilge pump order be paid?",
     [("invoices/halvorsen-INV-20417.pdf", 1, 2)]),
    ("pump-technician", "text-layer", "Who repaired pump station P-7 after it failed the pressure test?",
     [("reports/lake-orrin-field-report.pdf", 2, 2), ("reports/lake-orrin-field-report.pdf", 1, 1)]),
    ("pump-valve", "text-layer", "Which valve model was fitted at the Lake Orrin station?",
     [("reports/lake-orrin-field-report.pdf", 2, 2)]),
    ("pump-retest", "text-layer", "On what day did the Lake Orrin station pass its retest?",
     [("reports/lake-orrin-field-report.pdf", 2, 2)]),
    ("drill-price", "text-layer", "What does the ZX-9310-B cordless drill cost?",
     [("catalog/norrland-tools-catalog.pdf", 1, 2), ("images/label-ZX-9310-B.png", 1, 1)]),
    ("lease-rent", "scanned", "How much rent is due each month for unit 14B on Kestrel Street?",
     [("scans/lease-kestrel-street.pdf", 1, 2)]),
    ("lease-tenant", "scanned", "Who rents the flat from Orchard Row Properties?",
     [("scans/lease-kestrel-street.pdf", 1, 2)]),
    ("delivery-pallets", "scanned", "How many pallets arrived with delivery note DN-5531?",
     [("scans/delivery-note-DN-5531.pdf", 1, 2)]),
    ("leave-carry-over", "office", "How many unused vacation days can staff take into the next year?",
     [("office/leave-policy.docx", 1, 2)]),
    ("leave-contact", "office", "Who approves carrying vacation days over?",
     [("office/leave-policy.docx", 1, 2)]),
    ("leave-parental", "office", "How many weeks of paid parental leave do parents get?",
     [("office/leave-policy.docx", 2, 2)]),
    ("sprint-database", "image", "Which database is billing moving to in sprint 42?",
     [("images/whiteboard-sprint-42.png", 1, 2)]),
    ("sprint-owner", "image", "Who owns the billing migration on the sprint whiteboard?",
     [("images/whiteboard-sprint-42.png", 1, 2)]),
    ("label-batch", "image", "What batch number is printed on the ZX-9310-B drill's label?",
     [("images/label-ZX-9310-B.png", 1, 2)]),
]


def write_text_pdf(path: Path, pages: tuple[tuple[str, ...], ...]) -> None:
    from reportlab.lib.pagesizes import letter
    from reportlab.pdfgen import canvas

    c = canvas.Canvas(str(path), pagesize=letter, invariant=1)  # same bytes every run
    for lines in pages:
        c.setFont("Helvetica-Bold", 22)
        c.drawString(72, 700, lines[0])
        c.setFont("Helvetica", 12)
        y = 660
        for line in lines[1:]:
            for part in textwrap.wrap(line, 80) or [""]:
                c.drawString(72, y, part)
                y -= 20
        c.setFillGray(0.85)
        c.rect(72, 96, 468, 40, fill=1, stroke=0)
        c.showPage()
    c.save()


def scan_image(lines: tuple[str, ...], seed: int):
    """A page as a scanner gives it: 200 dpi, grey, a little skewed, specks; no text layer anywhere."""
    from PIL import Image, ImageDraw, ImageFont

    page = Image.new("L", (1700, 2200), 255)
    draw = ImageDraw.Draw(page)
    title, body = ImageFont.load_default(size=58), ImageFont.load_default(size=40)
    draw.text((170, 220), lines[0], font=title, fill=20)
    y = 360
    for line in lines[1:]:
        for part in textwrap.wrap(line, 60) or [""]:
            draw.text((170, y), part, font=body, fill=35)
            y += 62
    specks = random.Random(seed)
    for _ in range(400):
        x, y = specks.randrange(1700), specks.randrange(2200)
        draw.point((x, y), fill=specks.randrange(90, 200))
    page = page.rotate(0.6, resample=Image.Resampling.BICUBIC, fillcolor=255)
    ImageDraw.Draw(page).rectangle((0, 0, 24, 2199), fill=200)  # the shadow of the scanner's lid
    return page


def write_scan_pdf(path: Path, pages: tuple[tuple[str, ...], ...], seed: int) -> None:
    from reportlab.lib.pagesizes import letter
    from reportlab.lib.utils import ImageReader
    from reportlab.pdfgen import canvas

    c = canvas.Canvas(str(path), pagesize=letter, invariant=1)
    for number, lines in enumerate(pages):
        c.drawImage(ImageReader(scan_image(lines, seed + number)), 0, 0, width=letter[0], height=letter[1])
        c.showPage()
    c.save()


def write_docx(path: Path, pages: tuple[tuple[str, ...], ...]) -> None:
    import datetime

    import docx

    document = docx.Document()
    for number, lines in enumerate(pages):
        if number:
            document.add_page_break()
        document.add_heading(lines[0], 1)
        for line in lines[1:]:
            document.add_paragraph(line)
    fixed = datetime.datetime(2025, 1, 1, tzinfo=datetime.timezone.utc)
    props = document.core_properties
    props.author = props.last_modified_by = "lgpt-index"
    props.created = props.modified = fixed
    props.revision = 1
    buffer = io.BytesIO()
    document.save(buffer)
    _fixed_zip(buffer.getvalue(), path)


def _fixed_zip(data: bytes, path: Path) -> None:
    """The same zip with fixed member times (python-docx stamps them with the time of saving)."""
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            member = zipfile.ZipInfo(info.filename, date_time=(2025, 1, 1, 0, 0, 0))
            member.compress_type = zipfile.ZIP_DEFLATED
            target.writestr(member, source.read(info.filename))


def write_png(path: Path, lines: tuple[str, ...], seed: int) -> None:
    """A photographed whiteboard or product label: colour, large text, no document around it."""
    from PIL import Image, ImageDraw, ImageFont

    label = "label" in path.name
    image = Image.new("RGB", (1400, 900), (232, 116, 36) if label else (236, 238, 232))
    draw = ImageDraw.Draw(image)
    if label:
        draw.rounded_rectangle((120, 100, 1280, 800), radius=30, fill=(252, 252, 248), outline=(40, 40, 40), width=6)
    ink = [(20, 40, 120), (150, 20, 30), (20, 90, 40)]
    draw.text((180, 150), lines[0], font=ImageFont.load_default(size=72), fill=(20, 20, 20))
    body = ImageFont.load_default(size=50)
    for number, line in enumerate(lines[1:]):
        draw.text((180, 290 + 105 * number), line, font=body, fill=(20, 20, 20) if label else ink[number % 3])
    rng = random.Random(seed)
    for _ in range(6):  # marker smudges, barcode bars: what a picture has besides its text
        x = rng.randrange(900, 1250)
        draw.rectangle((x, 650, x + rng.randrange(4, 18), 760), fill=(30, 30, 30) if label else (200, 205, 200))
    image.save(path, optimize=True)


def write_queries(out: Path) -> None:
    lines = []
    for query_id, category, question, relevant in QUERIES:
        judged = [{"path": f"docs/{path}", "page": page, "grade": grade} for path, page, grade in relevant]
        lines.append(json.dumps({"id": query_id, "category": category, "query": question, "relevant": judged}))
    (out / "queries.jsonl").write_text("\n".join(lines) + "\n")


def write_beir(out: Path) -> None:
    """The same set in BEIR's layout: a corpus row per page, its `_id` PATH#PAGE, its text the planted lines."""
    beir = out / "beir"
    (beir / "qrels").mkdir(parents=True, exist_ok=True)
    corpus = [{"_id": f"docs/{doc.path}#{number}", "title": lines[0], "text": " ".join(lines[1:])}
              for doc in DOCS for number, lines in enumerate(doc.pages, 1)]
    (beir / "corpus.jsonl").write_text("".join(json.dumps(row) + "\n" for row in corpus))
    (beir / "queries.jsonl").write_text("".join(json.dumps({"_id": q[0], "text": q[2], "category": q[1]}) + "\n" for q in QUERIES))
    rows = ["query-id\tcorpus-id\tscore"] + [f"{q[0]}\tdocs/{path}#{page}\t{grade}" for q in QUERIES for path, page, grade in q[3]]
    (beir / "qrels" / "test.tsv").write_text("\n".join(rows) + "\n")


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else ROOT / "examples" / "eval"
    for seed, doc in enumerate(DOCS):
        path = out / "docs" / doc.path
        path.parent.mkdir(parents=True, exist_ok=True)
        if doc.kind == "pdf":
            write_text_pdf(path, doc.pages)
        elif doc.kind == "scan":
            write_scan_pdf(path, doc.pages, seed * 100)
        elif doc.kind == "docx":
            write_docx(path, doc.pages)
        else:
            write_png(path, doc.pages[0], seed)
    write_queries(out)
    write_beir(out)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
