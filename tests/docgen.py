"""Make real documents of every supported kind, for tests and the bundled examples."""

from __future__ import annotations

from pathlib import Path


def make_pdf(path: Path, pages: list[str]) -> Path:
    from reportlab.lib.pagesizes import letter
    from reportlab.pdfgen import canvas

    path.parent.mkdir(parents=True, exist_ok=True)
    c = canvas.Canvas(str(path), pagesize=letter, invariant=1)  # same bytes every time
    for i, text in enumerate(pages, 1):
        c.setFont("Helvetica-Bold", 28)
        c.drawString(72, 700, text)
        c.setFont("Helvetica", 12)
        for line in range(20):
            c.drawString(72, 650 - 18 * line, f"Page {i}, line {line + 1}: {text.lower()} details and figures.")
        c.rect(72, 120, 200 + 30 * i, 60, fill=1)
        c.showPage()
    c.save()
    return path


# Pages as people have them: US letter, a 16:9 slide, a till receipt, A4 with a /Rotate, A4.
PAGE_SHAPES = [(612, 792, 0), (960, 540, 0), (226, 800, 0), (595, 842, 90), (595, 842, 0)]


def make_pdf_of_shapes(path: Path, shapes: list[tuple[float, float, int]] = PAGE_SHAPES) -> Path:
    """A PDF with one page per (width, height, rotation) in points and degrees."""
    from reportlab.pdfgen import canvas

    path.parent.mkdir(parents=True, exist_ok=True)
    c = canvas.Canvas(str(path), invariant=1)
    for i, (width, height, rotation) in enumerate(shapes, 1):
        c.setPageSize((width, height))
        c.setPageRotation(rotation)
        c.setFont("Helvetica-Bold", 20)
        c.drawString(20, height - 40, f"Page {i}: {width:g} x {height:g} pt")
        c.rect(20, 20, width / 2, height / 4, fill=1)
        c.showPage()
    c.save()
    return path


def make_docx(path: Path, paragraphs: list[str], page_breaks: int = 0) -> Path:
    import docx

    path.parent.mkdir(parents=True, exist_ok=True)
    document = docx.Document()
    document.add_heading(paragraphs[0], 0)
    for text in paragraphs[1:]:
        document.add_paragraph(text)
    for i in range(page_breaks):
        document.add_page_break()
        document.add_paragraph(f"Continued on page {i + 2}.")
    document.save(str(path))
    return path


def make_pptx(path: Path, titles: list[str]) -> Path:
    from pptx import Presentation

    path.parent.mkdir(parents=True, exist_ok=True)
    deck = Presentation()
    for title in titles:
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text = f"Key points about {title.lower()}"
    deck.save(str(path))
    return path


def make_xlsx(path: Path, rows: list[tuple]) -> Path:
    from openpyxl import Workbook

    path.parent.mkdir(parents=True, exist_ok=True)
    book = Workbook()
    sheet = book.active
    sheet.title = "Revenue"
    for row in rows:
        sheet.append(list(row))
    book.save(str(path))
    return path


def make_png(path: Path, text: str, size: tuple[int, int] = (640, 480)) -> Path:
    from PIL import Image, ImageDraw

    path.parent.mkdir(parents=True, exist_ok=True)
    image = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(image)
    draw.rectangle((20, 20, size[0] - 20, 120), fill=(30, 90, 200))
    draw.text((40, 60), text, fill="white")
    draw.ellipse((200, 200, 400, 400), outline="black", width=6)
    image.save(path)
    return path


def make_corpus(root: Path) -> dict[str, Path]:
    """A small mixed folder with nested sub-folders; returns the files by role."""
    files = {
        "pdf": make_pdf(root / "reports" / "annual-report.pdf", ["Annual report 2024", "Revenue by quarter", "Outlook"]),
        "docx": make_docx(root / "reports" / "memo.docx", ["Quarterly memo", "Q3 revenue grew 12 percent.", "Costs were flat."],
                          page_breaks=1),
        "pptx": make_pptx(root / "slides" / "deck.pptx", ["Market overview", "Customers", "Next steps"]),
        "xlsx": make_xlsx(root / "data" / "numbers" / "revenue.xlsx",
                          [("Quarter", "Revenue"), ("Q1", 100), ("Q2", 120), ("Q3", 134), ("Q4", 150)]),
        "md": root / "notes" / "readme.md",
        "png": make_png(root / "scans" / "receipt.png", "Invoice total: 42.00"),
    }
    files["md"].parent.mkdir(parents=True, exist_ok=True)
    files["md"].write_text("# Meeting notes\n\n- revenue review\n- hiring plan\n\n| item | owner |\n|---|---|\n| budget | ana |\n")
    return files


def make_xobject_bomb(path: Path, levels: int = 20, fanout: int = 4) -> Path:
    """A 6 KB PDF whose page draws form XObject 1, which draws form 2 `fanout` times, and so on:
    fanout ** levels draws keep a renderer busy for ever."""
    objects = {1: b"<< /Type /Catalog /Pages 2 0 R >>", 2: b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>"}
    first_form = 5
    objects[3] = (b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
                  b"/Resources << /XObject << /X %d 0 R >> >> >>" % first_form)
    content = b"q /X Do Q"
    objects[4] = b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content)
    for level in range(levels):
        number = first_form + level
        if level + 1 < levels:
            body = b" ".join(b"q 0.5 0 0 0.5 %d %d cm /X Do Q" % (i * 10, i * 10) for i in range(fanout))
            resources = b"/Resources << /XObject << /X %d 0 R >> >>" % (number + 1)
        else:
            body, resources = b"0 0 1 1 re f", b""
        objects[number] = (b"<< /Type /XObject /Subtype /Form /BBox [0 0 612 792] %s /Length %d >>\nstream\n%s\nendstream"
                           % (resources, len(body), body))
    out = bytearray(b"%PDF-1.4\n")
    offsets = {}
    for number in sorted(objects):
        offsets[number] = len(out)
        out += b"%d 0 obj\n%s\nendobj\n" % (number, objects[number])
    xref = len(out)
    count = max(objects) + 1
    out += b"xref\n0 %d\n0000000000 65535 f \n" % count
    for number in range(1, count):
        out += b"%010d 00000 n \n" % offsets[number]
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (count, xref)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(out))
    return path
