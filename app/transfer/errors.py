"""The one error an export or import raises for bad input: its message is fit to show."""


class TransferError(Exception):
    """A file that cannot be imported, or an export that cannot be written."""
