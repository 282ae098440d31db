"""The README results table and the docs/results.md summary, generated from the files in results/.

Why: tables typed by hand drift from the measurements they quote (a rerun rewrites a file, the table keeps
the old figure) and from the code (a default changes, the row still describes the old schedule). Here every
figure is read from a results file through a JSON path named in ``results/readme_rows.json``; the manifest
holds only labels, paths, the reproducing command and whether the row is still what today's code runs.
``tests/test_results_table.py`` fails when README.md or docs/results.md differ from what this renders.

    python scripts/results_table.py            # print the README table
    python scripts/results_table.py --write    # rewrite both marked regions
    python scripts/results_table.py --check    # exit 1 when either region differs from the files

Manifest rows (a JSON list, in README order) have these keys:

- ``label``, ``setting``, ``lossless``: text of the method, "model, dtype, data" and lossless cells;
- ``file``: the results file (repository-relative) every path below reads, unless a template names another;
- ``tokens_per_forward``, ``speedup``: a JSON path, a list of paths (joined by " / "), ``{"range": [paths]}``
  (shown as min-max) or null (empty cell; ``speedup`` may then be carried by ``note``);
- ``tokens_note``, ``note``: text appended to the tokens and speedup cells; ``speedup_suffix``: text right
  after the speedup figure (e.g. "of sampled AR");
- ``hardware``: JSON path of the hardware line when it is not the file's top-level ``hardware`` key;
- ``command``: the reproducing command (default: the file's ``command`` key, venv prefix dropped);
- ``details``: a link, relative to docs/results.md, to the section that explains the row (docs only);
- ``readme``: false for a row shown only in docs/results.md;
- ``status``: ``current`` or ``historical``; ``why_historical``: one line saying what changed since;
- ``docs_<key>``: replaces ``<key>`` in the docs/results.md table (e.g. a longer ``docs_note``).

JSON paths are dot-separated keys; a list is indexed by a number or by ``[key=value,...]`` (the one element
whose fields match, so a rewritten file cannot silently move a row onto another method); ``@dataset`` on a
bench method entry gives that dataset's ``generations``, ``mean_accepted_tokens``, ``tokens_per_s`` and
``speedup_vs_ar``,
summed from ``per_sample`` against the file's ``methods.ar`` (as ``fastforward chimera-report`` does).
Text fields take ``{fmt:path}`` or ``{fmt:results/other.json#path}`` placeholders; fmt is ``x`` (speedup,
"1.65x"), ``bx`` (the same, bold from 1.2x), ``f1``/``f2``/``f3`` (decimals), ``int`` or ``g`` (as stored).
No figure is typed into the manifest.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = "results/readme_rows.json"


@dataclass(frozen=True)
class Target:
    """One generated region: the file, its markers, and how rows and links are written there."""

    path: str  # repository-relative
    start: str
    end: str
    docs: bool  # docs/results.md: every row, docs_* overrides, a details link; links relative to docs/


README = Target("README.md", "<!-- results-table:start -->", "<!-- results-table:end -->", docs=False)
DOCS = Target("docs/results.md", "<!-- results-summary:start -->", "<!-- results-summary:end -->", docs=True)
TARGETS = (README, DOCS)

# Bold marks a speedup beyond the ±15% run-to-run noise docs/results.md states for this 2-core machine, so a
# bold figure is a gain that one rerun would not undo.
BOLD_FROM = 1.2

HEADER = (
    "| method | model, dtype, data | CPU (ISA) | tokens / target forward | speedup vs AR "
    "| lossless (fp32 test) | source |\n"
    "|---|---|---|---:|---:|---|---|"
)
HISTORICAL_NOTE = (
    "† historical: the file predates the code that now runs this method by default, and its command does "
    "not pin the schedule it measured, so running the command today measures something else:"
)

_PLACEHOLDER = re.compile(r"\{(x|bx|f1|f2|f3|int|g):([^{}]+)\}")
_SEGMENT = re.compile(r"([^.\[\]]+)|\[([^\]]*)\]|(\.)")


class ResultsTableError(Exception):
    """A manifest row that cannot be rendered: the message names the row, the file and the path."""


def _segments(path: str) -> list[str | int | dict[str, str]]:
    """Split ``a.b[k=v,k2=v2].c[0]`` into keys, list indices and list selectors."""
    out: list[str | int | dict[str, str]] = []
    pos = 0
    for m in _SEGMENT.finditer(path):
        if m.start() != pos:
            raise ValueError(f"bad JSON path {path!r}")
        pos = m.end()
        key, bracket = m.group(1), m.group(2)
        if key is not None:
            out.append(key)
        elif bracket is not None:
            if bracket.strip().lstrip("-").isdigit():
                out.append(int(bracket))
            else:
                pairs = [p.split("=", 1) for p in bracket.split(",")]
                if any(len(p) != 2 for p in pairs):
                    raise ValueError(f"bad list selector [{bracket}] in {path!r}")
                out.append({k.strip(): v.strip() for k, v in pairs})
    if pos != len(path) or not out:
        raise ValueError(f"bad JSON path {path!r}")
    return out


def _dataset_of(sample: dict[str, Any]) -> str:
    """A per-sample record's dataset; files written before the field existed: the id's prefix."""
    return sample.get("dataset") or str(sample["id"]).rsplit("-", 1)[0]


def _per_dataset(entry: dict[str, Any], ar: dict[str, Any], dataset: str) -> dict[str, float]:
    """One dataset's share of a bench entry, every sample counted, speed against AR on the same dataset."""

    def totals(samples: list[dict[str, Any]]) -> tuple[float, float, float]:
        rows = [s for s in samples if _dataset_of(s) == dataset]
        if not rows:
            raise KeyError(f"@{dataset}")
        return (
            sum(s["new_tokens"] for s in rows),
            sum(s["wall_time_s"] for s in rows),
            sum(s["target_forwards"] for s in rows),
        )

    n, wall, fwd = totals(entry["per_sample"])
    ar_n, ar_wall, _ = totals(ar["per_sample"])
    tps = n / wall
    return {
        "generations": len([s for s in entry["per_sample"] if _dataset_of(s) == dataset]),
        "mean_accepted_tokens": n / fwd,
        "tokens_per_s": tps,
        "speedup_vs_ar": tps / (ar_n / ar_wall),
    }


def lookup(data: Any, path: str) -> Any:
    """The value at ``path`` in ``data``; KeyError names the first segment that is missing or ambiguous."""
    cur = data
    for seg in _segments(path):
        if isinstance(seg, int):
            if not isinstance(cur, list) or not -len(cur) <= seg < len(cur):
                raise KeyError(f"[{seg}]")
            cur = cur[seg]
        elif isinstance(seg, dict):
            if not isinstance(cur, list):
                raise KeyError(f"[{seg}] (not a list)")
            hits = [e for e in cur if isinstance(e, dict) and all(str(e.get(k)) == v for k, v in seg.items())]
            if len(hits) != 1:
                sel = ",".join(f"{k}={v}" for k, v in seg.items())
                raise KeyError(f"[{sel}] ({len(hits)} matches)")
            cur = hits[0]
        elif seg.startswith("@"):
            if not isinstance(cur, dict) or "per_sample" not in cur:
                raise KeyError(f"{seg} (no per_sample)")
            cur = _per_dataset(cur, lookup(data, "methods.ar"), seg[1:])
        else:
            if not isinstance(cur, dict) or seg not in cur:
                raise KeyError(seg)
            cur = cur[seg]
    return cur


def fmt_speedup(x: float, bold: bool = False) -> str:
    """``1.65x``; bold from BOLD_FROM when asked (see BOLD_FROM for why)."""
    s = f"{x:.2f}x"
    return f"**{s}**" if bold and x >= BOLD_FROM else s


def _format(fmt: str, value: Any) -> str:
    if fmt == "g":
        return str(value)
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise TypeError(f"not a number: {value!r}")
    if fmt == "x":
        return fmt_speedup(value)
    if fmt == "bx":
        return fmt_speedup(value, bold=True)
    if fmt == "int":
        return str(int(value))
    return f"{value:.{int(fmt[1])}f}"


class Row:
    """One manifest row bound to its results files, so every figure it shows is read, never typed."""

    def __init__(self, spec: dict[str, Any], root: Path, cache: dict[str, Any]) -> None:
        self.spec = spec
        self.root = root
        self.cache = cache
        self.name = f"{spec.get('label', '?')} | {spec.get('setting', '?')}"
        self.file = spec.get("file")
        if not self.file:
            raise ResultsTableError(f"row {self.name!r}: no 'file'")
        self.extra_files: list[str] = []

    def load(self, file: str) -> Any:
        if file not in self.cache:
            p = self.root / file
            try:
                self.cache[file] = json.loads(p.read_text(encoding="utf-8"))
            except FileNotFoundError:
                raise ResultsTableError(f"row {self.name!r}: results file {file} does not exist") from None
            except json.JSONDecodeError as e:
                raise ResultsTableError(f"row {self.name!r}: {file} is not JSON ({e})") from None
        return self.cache[file]

    def get(self, path: str, file: str | None = None) -> Any:
        file = file or self.file
        if file != self.file and file not in self.extra_files:
            self.extra_files.append(file)
        try:
            return lookup(self.load(file), path)
        except KeyError as e:
            raise ResultsTableError(
                f"row {self.name!r}: {file} has no value at JSON path {path!r} (missing: {e.args[0]})"
            ) from None
        except ValueError as e:
            raise ResultsTableError(f"row {self.name!r}: {e}") from None

    def number(self, path: str) -> float:
        v = self.get(path)
        if not isinstance(v, int | float) or isinstance(v, bool):
            raise ResultsTableError(f"row {self.name!r}: {self.file} {path!r} is {v!r}, not a number")
        return float(v)

    def text(self, template: str | None) -> str:
        """Fill ``{fmt:path}`` / ``{fmt:file#path}`` placeholders from the files."""
        if not template:
            return ""

        def fill(m: re.Match[str]) -> str:
            fmt, ref = m.group(1), m.group(2)
            file, _, path = ref.rpartition("#")
            value = self.get(path, file or None)
            try:
                return _format(fmt, value)
            except TypeError as e:
                raise ResultsTableError(f"row {self.name!r}: {ref!r}: {e}") from None

        return _PLACEHOLDER.sub(fill, template)

    def figures(self, spec: Any, speedup: bool) -> str:
        """A tokens or speedup cell's figures: one path, several joined by ' / ', or a min-max range."""
        if spec is None:
            return ""
        if isinstance(spec, dict):
            vals = [self.number(p) for p in spec["range"]]
            lo, hi = min(vals), max(vals)
            return f"{fmt_speedup(lo)}-{fmt_speedup(hi)}" if speedup else f"{lo:.2f}-{hi:.2f}"
        paths = [spec] if isinstance(spec, str) else spec
        vals = [self.number(p) for p in paths]
        return " / ".join(fmt_speedup(v, bold=True) if speedup else f"{v:.2f}" for v in vals)

    def cpu(self) -> str:
        """CPU and ISA as the file records them: an ``isa`` key, else parsed from the hardware line."""
        data = self.load(self.file)
        hw_path = self.spec.get("hardware", "hardware")
        try:
            hw = lookup(data, hw_path)
        except KeyError:
            hw = None
        isa = data.get("isa") if isinstance(data, dict) else None
        return describe_cpu(hw if isinstance(hw, str) else None, isa if isinstance(isa, str) else None)

    def command(self) -> str:
        cmd = self.spec.get("command")
        if cmd:
            return cmd
        data = self.load(self.file)
        cmd = data.get("command") if isinstance(data, dict) else None
        if not isinstance(cmd, str):
            raise ResultsTableError(
                f"row {self.name!r}: no 'command' in the manifest and none in {self.file}"
            )
        return re.sub(r"\S*/bin/fastforward\b", "fastforward", cmd)


def describe_cpu(hardware: str | None, isa: str | None = None) -> str:
    """``AMD EPYC, AVX512 (+bf16, vnni)`` from a hardware line such as
    ``AMD EPYC, ISA AVX512 (+bf16, vnni), 2 cores, torch ...``; lines written before the ISA was recorded
    say so rather than borrow the ISA of another machine."""
    if not hardware:
        return f"not recorded, {isa}" if isa else "not recorded"
    parts = _split_top(hardware.split(";")[0])
    name = re.sub(r"\((R|TM)\)|\s+Processor\b|\s+CPU\b", "", parts[0]).strip()
    capped = re.search(r"\((capped:[^)]*)\)", name)
    name = re.sub(r"\s*\(capped:[^)]*\)", "", name).strip()
    if isa is None:
        isa = next((p[4:].strip() for p in parts[1:] if p.startswith("ISA ")), None)
    if isa is None:
        return f"{name}, ISA not recorded"
    return f"{name}, {isa} ({capped.group(1)})" if capped else f"{name}, {isa}"


def _split_top(s: str) -> list[str]:
    """Split on commas outside parentheses."""
    out, depth, cur = [], 0, ""
    for ch in s:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    out.append(cur.strip())
    return out


def _cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ").strip()


def load_manifest(root: Path) -> list[dict[str, Any]]:
    p = root / MANIFEST
    try:
        rows = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ResultsTableError(f"{MANIFEST}: {e}") from None
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise ResultsTableError(f"{MANIFEST}: expected a list of row objects")
    for r in rows:
        if r.get("status") not in ("current", "historical"):
            raise ResultsTableError(
                f"{MANIFEST}: row {r.get('label')!r}: status must be current or historical"
            )
        if r["status"] == "historical" and not r.get("why_historical"):
            raise ResultsTableError(f"{MANIFEST}: row {r.get('label')!r}: historical without why_historical")
    return rows


def render(root: Path, target: Target) -> str:
    """The markdown that belongs between ``target``'s markers (table, then the historical footnote)."""
    cache: dict[str, Any] = {}
    prefix = "../" if target.docs else ""
    lines = [HEADER]
    historical: list[str] = []
    for spec in load_manifest(root):
        if not target.docs and spec.get("readme", True) is False:
            continue
        if target.docs:
            spec = {**spec, **{k[5:]: v for k, v in spec.items() if k.startswith("docs_")}}
        row = Row(spec, root, cache)
        label = row.text(spec.get("label"))
        setting = row.text(spec.get("setting"))
        tokens = " ".join(
            s
            for s in (row.figures(spec.get("tokens_per_forward"), False), row.text(spec.get("tokens_note")))
            if s
        )
        speed = row.figures(spec.get("speedup"), True)
        if speed and spec.get("speedup_suffix"):
            speed += " " + row.text(spec["speedup_suffix"])
        note = row.text(spec.get("note"))
        speed = f"{speed}{'' if note.startswith((';', ',')) else ' '}{note}".strip() if note else speed
        lossless = row.text(spec.get("lossless"))
        cpu = row.cpu()
        cmd = row.command()
        source = f"[{row.file}]({prefix}{row.file})"
        if row.extra_files:
            source += ", " + ", ".join(f"[{f}]({prefix}{f})" for f in row.extra_files)
        source += f": `{cmd}`"
        if target.docs and spec.get("details"):
            source += f" ([details]({spec['details']}))"
        if spec["status"] == "historical":
            historical.append(f"- {label}, {setting}: {spec['why_historical']}.")
            label += " †"
        cells = [label, setting, cpu, tokens, speed, lossless, source]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    if historical:
        lines += ["", HISTORICAL_NOTE, "", *historical]
    return "\n".join(lines) + "\n"


def _region(text: str, target: Target) -> tuple[int, int]:
    """Offsets of the text between the markers (after the start line, up to the end marker)."""
    if text.count(target.start) != 1 or text.count(target.end) != 1:
        raise ResultsTableError(f"{target.path}: expected one {target.start} and one {target.end}")
    a = text.index(target.start) + len(target.start)
    a = text.index("\n", a) + 1
    b = text.index(target.end)
    if b < a:
        raise ResultsTableError(f"{target.path}: {target.end} comes before {target.start}")
    return a, b


def check(root: Path = ROOT) -> list[str]:
    """One line per target whose marked region differs from what the results files render; empty: agree."""
    problems = []
    for t in TARGETS:
        text = (root / t.path).read_text(encoding="utf-8")
        a, b = _region(text, t)
        want, have = render(root, t), text[a:b]
        if want != have:
            diff = [
                d
                for d in difflib.unified_diff(have.splitlines(), want.splitlines(), lineterm="", n=0)
                if d[:1] in "+-" and not d.startswith(("+++", "---"))
            ]
            first = diff[0] if diff else "(whitespace)"
            problems.append(
                f"{t.path}: the table between {t.start} and {t.end} differs from the results files in "
                f"{sum(d.startswith('-') for d in diff)} line(s), first: {first[:160]!r}; "
                "run python scripts/results_table.py --write"
            )
    return problems


def write(root: Path = ROOT) -> list[str]:
    """Rewrite every target's region; returns the paths that changed."""
    changed = []
    for t in TARGETS:
        p = root / t.path
        text = p.read_text(encoding="utf-8")
        a, b = _region(text, t)
        new = text[:a] + render(root, t) + text[b:]
        if new != text:
            p.write_text(new, encoding="utf-8")
            changed.append(t.path)
    return changed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the marked regions of README.md and docs")
    mode.add_argument("--check", action="store_true", help="exit 1 when a marked region differs")
    mode.add_argument("--docs", action="store_true", help="print the docs/results.md table instead")
    args = ap.parse_args(argv)
    try:
        if args.write:
            changed = write()
            print("rewrote " + ", ".join(changed) if changed else "README.md and docs/results.md up to date")
        elif args.check:
            problems = check()
            for p in problems:
                print(p, file=sys.stderr)
            return 1 if problems else 0
        else:
            sys.stdout.write(render(ROOT, DOCS if args.docs else README))
    except ResultsTableError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
