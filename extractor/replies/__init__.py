"""What the extractor answers: the Importable ``Document``, every reply format rendered from it,
and the JSON schemas every reply is checked against."""
