"""The HTTP face of the extractor: the Flask app, its routes and the OpenAPI document.

Routes turn a request into a call of the pipeline and its errors into responses; nothing here
knows an engine.
"""
