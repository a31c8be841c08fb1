"""A pickle that does something when loaded, for the tests that prove a data file is never unpickled."""


class Payload:
    """Unpickling it creates the file `marker` (what a hostile pickle would do, harmlessly)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))
