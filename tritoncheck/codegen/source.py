"""Building generated source safely: an indented buffer, a name space, and one escaping function.

A spec is untrusted input, and generated kernels (Triton modules, C files) are imported or
compiled. So generated source is assembled from the plan's structured values only:

- identifiers come from a `NameSpace`, which derives an ASCII identifier from any text, never
  hands out a reserved or already-used name, and is the only source of names in a kernel;
- numbers are formatted by the generator itself;
- any text from the spec (rule text, names, bounds, hints) reaches the source only through
  `comment`, which returns one line of a safe ASCII alphabet, fit for a `#` or `//` comment.
"""

from __future__ import annotations

import contextlib
import keyword
import re

# Characters that may appear in a generated comment: printable ASCII without the ones that can end
# or extend a comment or a line (`\` continues a C `//` comment; `?` starts a C trigraph such as
# `??/`) or open a string or docstring in any generated language.
_COMMENT_SAFE = re.compile(r"[A-Za-z0-9 _.,:;+\-*/=<>!()\[\]{}&|~%^@$]")
_NOT_IDENT = re.compile(r"[^A-Za-z0-9_]")
MAX_COMMENT_CHARS = 160

# Names no generated identifier may take: Python and C keywords, names the generated modules
# import or define, and C's reserved forms are handled in `create_name`.
_C_KEYWORDS = frozenset(
    "auto break case char const continue default do double else enum extern float for goto if inline int "
    "long register restrict return short signed sizeof static struct switch typedef union unsigned void "
    "volatile while bool true false NULL uint8_t uint16_t uint32_t uint64_t int8_t int16_t int32_t "
    "int64_t size_t ptrdiff_t memcpy isnan isinf isfinite fabs floor fmod INFINITY NAN main".split()
)
_PY_RESERVED = frozenset({*keyword.kwlist, *keyword.softkwlist, "tl", "triton", "math", "float", "int", "range",
                          "abs", "min", "max", "len", "print", "self", "None", "True", "False"})
RESERVED = _C_KEYWORDS | _PY_RESERVED


def comment(text: object, limit: int = MAX_COMMENT_CHARS) -> str:
    """`text` as one line of safe characters for a generated comment (the only way spec text gets in).

    Anything outside the safe alphabet, a newline or a quote included, becomes `<U+XXXX>`, so the
    comment can neither end early nor start code; long text is cut and marked.
    """
    out = "".join(ch if _COMMENT_SAFE.fullmatch(ch) else f"<U+{ord(ch):04X}>" for ch in str(text))
    return out if len(out) <= limit else out[: limit - 3] + "..."


class IndentedBuffer:
    """Lines of source with an indentation level (FlagGems' code buffer)."""

    def __init__(self, level: int = 0, indent: str = "    ") -> None:
        self.lines: list[str] = []
        self.level = level
        self.unit = indent

    def writeline(self, line: str = "") -> None:
        self.lines.append((self.unit * self.level + line) if line else "")

    def writelines(self, lines: list[str]) -> None:
        for line in lines:
            self.writeline(line)

    def splice(self, other: IndentedBuffer) -> None:
        """Append another buffer's lines as they are (it tracked its own indentation)."""
        self.lines.extend(other.lines)

    @contextlib.contextmanager
    def indent(self, by: int = 1):
        self.level += by
        try:
            yield
        finally:
            self.level -= by

    def getvalue(self) -> str:
        return "\n".join(self.lines) + "\n"


class NameSpace:
    """Unique ASCII identifiers derived from arbitrary text (`bbox.2` -> `bbox_2`).

    Every identifier in a generated kernel comes from here, so a field called `out`, `i` or
    `size` cannot shadow an argument, a loop index or a keyword: it simply gets another name.
    """

    def __init__(self, reserved: frozenset[str] | set[str] = RESERVED) -> None:
        self.used: set[str] = set(reserved)

    def create_name(self, base: str) -> str:
        name = _NOT_IDENT.sub("_", base)[:40]
        if not name or not name[0].isalpha():
            name = "v" + name  # no leading digit, and no `_x`: C reserves `__x` and `_X`, Python `__x__`
        out, i = name, 1
        while out in self.used:
            out, i = f"{name}_{i}", i + 1
        self.used.add(out)
        return out


__all__ = ["IndentedBuffer", "NameSpace", "comment", "RESERVED"]
