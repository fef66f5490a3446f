"""flowpoint's version (``flowpoint.__version__``)."""

__version__ = "0.1.0"
