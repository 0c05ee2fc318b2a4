"""Answering queries: an index view with its model's query encoder, text and hybrid queries, fusion."""
