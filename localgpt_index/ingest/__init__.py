"""From files to pages: discovery, conversion, rendering, page text and OCR, under bounded external processes."""
