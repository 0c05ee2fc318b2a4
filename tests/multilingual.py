"""A multilingual planted-fact corpus: German, French, Spanish and English text PDFs (and a few scans),
names, places and terms with diacritics and inflections, near-miss distractors, and product codes.

Each fact is one sentence planted on one page among filler in its language; it is asked three ways:
as the document spells it, without accents, and in another inflection. Each code is asked as
written, beside distractor pages holding near-miss codes; it must rank first."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

SPELLINGS = ("spelled", "unaccented", "inflected")


@dataclass(frozen=True)
class Fact:
    language: str
    sentence: str
    queries: dict[str, str]  # spelling -> question


def _fact(language: str, sentence: str, spelled: str, unaccented: str, inflected: str) -> Fact:
    return Fact(language, sentence, dict(zip(SPELLINGS, (spelled, unaccented, inflected))))


FACTS = [
    _fact("de", "Die Rechnungen der Müller GmbH wurden in Zürich geprüft.",
          "Rechnungen Müller GmbH Zürich", "Rechnungen Muller GmbH Zurich", "Rechnung Müller geprüften"),
    _fact("de", "Der Ingenieur Jürgen Weiß prüfte die Turbinen in Düsseldorf.",
          "Jürgen Weiß Turbinen Düsseldorf", "Jurgen Weiss Turbinen Dusseldorf", "Ingenieure Turbine Düsseldorfer"),
    _fact("de", "Die Lieferung nach Köln verzögerte sich wegen der Straßensperrung.",
          "Lieferung Köln Straßensperrung", "Lieferung Koln Strassensperrung", "Lieferungen Straßensperrungen verzögert"),
    _fact("de", "Frau Schröder übernahm die Prüfung der Verträge in Lübeck.",
          "Schröder Prüfung Verträge Lübeck", "Schroder Prufung Vertrage Lubeck", "Prüfungen Vertrag Lübeck"),
    _fact("fr", "La politique du café à Genève a été approuvée par Hélène Dupré.",
          "politique café Genève Hélène Dupré", "politique cafe Geneve Helene Dupre", "politiques cafés approuvé Dupré"),
    _fact("fr", "Les ingénieurs de Besançon ont réparé les éoliennes défectueuses.",
          "ingénieurs Besançon éoliennes", "ingenieurs Besancon eoliennes", "ingénieur éolienne défectueuse"),
    _fact("fr", "François Lefèvre a signé le contrat de la crèche à Orléans.",
          "François Lefèvre crèche Orléans", "Francois Lefevre creche Orleans", "contrats crèches Lefèvre signés"),
    _fact("fr", "Le château de Montbéliard accueille l'exposition des céramiques.",
          "château Montbéliard céramiques", "chateau Montbeliard ceramiques", "châteaux céramique expositions"),
    _fact("es", "El ingeniero José Núñez inspeccionó los camiones en Málaga.",
          "José Núñez camiones Málaga", "Jose Nunez camiones Malaga", "ingenieros camión Núñez"),
    _fact("es", "La reunión sobre la facturación se celebró en Cádiz con Begoña Ibáñez.",
          "reunión facturación Cádiz Begoña Ibáñez", "reunion facturacion Cadiz Begona Ibanez", "reuniones facturaciones Ibáñez"),
    _fact("es", "Los pagos atrasados de la compañía de Logroño fueron revisados.",
          "pagos atrasados compañía Logroño", "pagos atrasados compania Logrono", "pago atrasado compañías revisado"),
    _fact("es", "La señora Peña alquiló el almacén de Córdoba por tres años.",
          "Peña almacén Córdoba", "Pena almacen Cordoba", "almacenes Córdoba Peña alquilar"),
    _fact("en", "The engineers replaced the turbine blades at the Zürich plant.",
          "engineers turbine blades Zürich", "engineers turbine blades Zurich", "engineer turbines blade replacing"),
    _fact("en", "Late payments from Café Noir were escalated to the board.",
          "late payments Café Noir escalated", "late payments Cafe Noir escalated", "late payment escalation Noir"),
    _fact("en", "The warehouse in Reykjavík stores the shipping containers.",
          "warehouse Reykjavík shipping containers", "warehouse Reykjavik shipping containers", "warehouses container shipped"),
    _fact("en", "Dr. Søren Ødegaard audited the quarterly ledgers.",
          "Søren Ødegaard audited ledgers", "Soren Odegaard audited ledgers", "ledger audits Ødegaard"),
]

# near misses: the same names, places and terms with another letter, another accent, or another topic
DISTRACTORS = {
    "de": ["Die Möller AG prüft Rechnungsvorlagen in Zug.", "Herr Weis besuchte die Düne bei Kiel.",
           "Der Kölner Dom wurde gereinigt.", "Die Schröders wohnen in Lüneburg."],
    "fr": ["Le café de Genèva ferme le lundi.", "Duprez et fils vendent des éolides.",
           "La crémerie d'Orly a rouvert.", "Le chapeau de Montbard est bleu."],
    "es": ["José Núñes vende camisetas en Mallorca.", "La reunión de vecinos fue en Cádiz.",
           "El logro de la compañía fue celebrado.", "La peña flamenca de Córdova canta."],
    "en": ["The engine room at Zurich Airport was repainted.", "Noir coffee is served late.",
           "Reykjavik hosts a music festival.", "Soren Kierkegaard wrote about anxiety."],
}

FILLER = {
    "de": ["Der Bericht fasst die Ergebnisse des letzten Quartals zusammen.", "Die Abteilung plant neue Schulungen für das Personal.",
           "Im Anhang finden Sie die Tabellen mit den Kennzahlen.", "Die Sitzung wurde auf nächsten Dienstag verschoben.",
           "Alle Mitarbeiter sollen die neuen Richtlinien lesen.", "Das Budget für das kommende Jahr ist noch nicht genehmigt."],
    "fr": ["Le rapport résume les résultats du dernier trimestre.", "Le service prévoit de nouvelles formations pour le personnel.",
           "Vous trouverez en annexe les tableaux des indicateurs.", "La réunion a été reportée à mardi prochain.",
           "Tous les employés doivent lire les nouvelles directives.", "Le budget de l'année prochaine n'est pas encore voté."],
    "es": ["El informe resume los resultados del último trimestre.", "El departamento prepara nuevos cursos para el personal.",
           "En el anexo encontrará las tablas con los indicadores.", "La sesión se aplazó hasta el próximo martes.",
           "Todos los empleados deben leer las nuevas directrices.", "El presupuesto del año que viene aún no está aprobado."],
    "en": ["The report summarises the results of the last quarter.", "The department plans new training for the staff.",
           "The appendix holds the tables with the key figures.", "The meeting was moved to next Tuesday.",
           "All employees should read the new guidelines.", "The budget for the coming year is not yet approved."],
}

# (code, the sentence that holds it, near-miss codes on other pages)
CODES = [("INV-2024-0042", "Invoice INV-2024-0042 covers the freight charges.", ["INV-2024-0024", "INV-2023-0042", "INV-2024-00421"]),
         ("VX-424", "The pump VX-424 needs a new seal.", ["VX-4240", "VX-42", "VX-425"]),
         ("ZX-9310-B", "Spare part ZX-9310-B ships on Monday.", ["ZX-9310-C", "ZX-9301-B", "ZX-931-B"])]


@dataclass(frozen=True)
class Corpus:
    pages: dict[str, list[str]]  # file name -> its pages' text
    facts: dict[tuple[str, int], Fact]  # (file name, page) -> the fact planted there
    codes: dict[tuple[str, int], str]  # (file name, page) -> the code planted there


def corpus_pages(seed: int = 43) -> Corpus:
    """Per language one document: a page per fact and per distractor, each among filler; one codes document."""
    rng = random.Random(seed)
    pages: dict[str, list[str]] = {}
    facts: dict[tuple[str, int], Fact] = {}
    codes: dict[tuple[str, int], str] = {}

    def page(language: str, planted: str) -> str:
        lines = rng.sample(FILLER[language], 4)
        lines.insert(rng.randrange(len(lines) + 1), planted)
        return " ".join(lines)

    for language in FILLER:
        name = f"{language}-report.pdf"
        planted = [fact for fact in FACTS if fact.language == language]
        texts = [page(language, fact.sentence) for fact in planted] + [page(language, d) for d in DISTRACTORS[language]]
        pages[name] = texts
        facts.update({(name, number): fact for number, fact in enumerate(planted, 1)})
    texts = []
    for code, sentence, near in CODES:
        texts.append(page("en", sentence))
        codes[("codes.pdf", len(texts))] = code
        texts += [page("en", sentence.replace(code, other)) for other in near]
    pages["codes.pdf"] = texts
    return Corpus(pages, facts, codes)


def write_pdf(path: Path, pages: list[str]) -> Path:
    """A text PDF, one page per text, wrapped lines (Helvetica: Latin-1 and œ)."""
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    path.parent.mkdir(parents=True, exist_ok=True)
    sheet = canvas.Canvas(str(path), pagesize=A4, invariant=1)
    for text in pages:
        sheet.setFont("Helvetica", 12)
        y, line = 780, ""
        for word in text.split():
            if len(line) + len(word) > 80:
                sheet.drawString(60, y, line)
                y, line = y - 18, ""
            line = f"{line} {word}".strip()
        sheet.drawString(60, y, line)
        sheet.showPage()
    sheet.save()
    return path


def write_scan(path: Path, text: str) -> Path:
    """A page as a picture (no text layer): what OCR reads."""
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("L", (1700, 600), 255)
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=36)
    words, lines, line = text.split(), [], ""
    for word in words:
        if len(line) + len(word) > 60:
            lines.append(line)
            line = ""
        line = f"{line} {word}".strip()
    lines.append(line)
    for number, row in enumerate(lines):
        draw.text((60, 60 + 60 * number), row, fill=0, font=font)
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path)
    return path


# scans: (file name, the fact or code sentence): pictures only, read by OCR (Tesseract's English model)
SCANS = [("scan-en-1.png", FACTS[12]), ("scan-en-2.png", FACTS[14]), ("scan-code.png", CODES[1])]


def write_corpus(folder: Path, seed: int = 43, scans: bool = False) -> Corpus:
    """The text PDFs; with `scans`, also SCANS as pictures (their facts and codes added to the corpus's)."""
    corpus = corpus_pages(seed)
    for name, texts in corpus.pages.items():
        write_pdf(folder / name, texts)
    if scans:
        for name, planted in SCANS:
            if isinstance(planted, Fact):
                write_scan(folder / name, f"{FILLER['en'][0]} {planted.sentence} {FILLER['en'][1]}")
                corpus.facts[(name, 1)] = planted
            else:
                write_scan(folder / name, f"{FILLER['en'][2]} {planted[1]}")
                corpus.codes[(name, 1)] = planted[0]
    return corpus
