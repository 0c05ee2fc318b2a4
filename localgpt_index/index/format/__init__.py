"""The index's format, one for both stores: manifest, checksums, safe files, the disk layer, the PDF store."""
