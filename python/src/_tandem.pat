# nanobind stubgen patterns for _tandem.pyi: what the generator cannot see
# (module attributes set at import, the namedtuple OpResult).
^_tandem\.__suffix__$:
    import typing

    __version__: str

    class OpResult(typing.NamedTuple):
        """The answers of one op of a batch (Result[i])."""

        found: bool
        value: int
        key: int
        status: int

\.Result\.__getitem__$:
    def __getitem__(self, i: int) -> OpResult:
        \doc
