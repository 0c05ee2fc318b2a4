"""What crosses the index's edge: byaldi's format, imports and exports, page images, and the JSON documents."""
