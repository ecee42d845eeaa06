"""The report as a list of blocks, written twice: Markdown (report.md, PNGs beside it) and
one self-contained HTML page (report.html, PNGs inlined), so both carry the same tables,
figures and notes."""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Any

Block = tuple[str, Any]  # ("h1"|"h2"|"p", text), ("list", [lines]), ("table", (header, rows)),
#                          ("img", (file name, caption))


def markdown(blocks: list[Block]) -> str:
    out = []
    for kind, data in blocks:
        if kind == "h1":
            out.append(f"# {data}\n")
        elif kind == "h2":
            out.append(f"## {data}\n")
        elif kind == "p":
            out.append(f"{data}\n")
        elif kind == "list":
            out.extend(f"- {line}" for line in data)
            out.append("")
        elif kind == "table":
            header, rows = data
            out.append("| " + " | ".join(header) + " |")
            out.append("|" + "---|" * len(header))
            out.extend("| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows)
            out.append("")
        elif kind == "img":
            out.append(f"![{data[1]}]({data[0]})\n")
    return "\n".join(out)


def page(blocks: list[Block], folder: Path, title: str) -> str:
    """The same blocks as one self-contained page (PNGs inlined as data URIs)."""
    out = ["<!DOCTYPE html>", "<html><head><meta charset='utf-8'>",
           f"<title>{html.escape(title)}</title>",
           "<style>body{font-family:sans-serif;max-width:1200px;margin:auto}"
           "table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;"
           "padding:2px 6px}img{max-width:100%}</style></head><body>"]
    for kind, data in blocks:
        if kind in ("h1", "h2"):
            out.append(f"<{kind}>{html.escape(data)}</{kind}>")
        elif kind == "p":
            out.append(f"<p>{html.escape(data)}</p>")
        elif kind == "list":
            out.append("<ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in data)
                       + "</ul>")
        elif kind == "table":
            header, rows = data
            out.append("<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header)
                       + "</tr>")
            out.extend("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>"
                       for r in rows)
            out.append("</table>")
        elif kind == "img":
            png = base64.b64encode((folder / data[0]).read_bytes()).decode()
            out.append(f"<figure><img alt='{html.escape(data[1])}' "
                       f"src='data:image/png;base64,{png}'><figcaption>"
                       f"{html.escape(data[1])}</figcaption></figure>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"
