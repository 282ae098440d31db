"""The README results table and the docs/results.md summary agree with the results files they quote.

scripts/results_table.py renders both tables from results/readme_rows.json (labels, JSON paths, commands)
and the files in results/; a figure typed into README.md or a rerun that rewrote a file without
``--write`` makes these tests fail. The script is loaded from its path: scripts/ is not a package.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("results_table", REPO_ROOT / "scripts" / "results_table.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses resolve the module by name
    spec.loader.exec_module(mod)
    return mod


rt = _load_script()


def test_readme_and_docs_tables_match_the_results_files() -> None:
    problems = rt.check(REPO_ROOT)
    assert problems == [], "\n".join(problems)


def test_every_row_names_an_existing_file_and_command() -> None:
    for spec in rt.load_manifest(REPO_ROOT):
        assert (REPO_ROOT / spec["file"]).is_file(), spec["file"]
        row = rt.Row(spec, REPO_ROOT, {})
        assert row.command().strip(), spec["label"]


def _tiny_repo(root: Path, speedup: float = 1.5) -> Path:
    """A repository layout with one results file, a one-row manifest and both marked documents."""
    (root / "results").mkdir()
    (root / "docs").mkdir()
    bench = {
        "hardware": "AMD EPYC, ISA AVX512 (+bf16, vnni), 2 cores, torch 2.13.0+cpu (2 threads)",
        "command": "/tmp/venv/bin/fastforward bench --methods ar,pld --out results/tiny.json",
        "methods": {"pld": {"mean_accepted_tokens": 1.8765, "speedup_vs_ar": speedup}},
        "runs": [{"label": "pld", "dataset": "gsm8k", "speedup_vs_ar": 0.9}],
    }
    (root / "results" / "tiny.json").write_text(json.dumps(bench), encoding="utf-8")
    row = {
        "label": "`pld`",
        "setting": "tiny, bf16, GSM8K",
        "file": "results/tiny.json",
        "tokens_per_forward": "methods.pld.mean_accepted_tokens",
        "speedup": "methods.pld.speedup_vs_ar",
        "note": "(run {x:runs[label=pld,dataset=gsm8k].speedup_vs_ar})",
        "lossless": "yes",
        "status": "historical",
        "why_historical": "measured before the step gate",
    }
    (root / "results" / "readme_rows.json").write_text(json.dumps([row]), encoding="utf-8")
    for t in rt.TARGETS:
        (root / t.path).write_text(f"# doc\n\n{t.start}\nold\n{t.end}\n\nprose\n", encoding="utf-8")
    return root


def test_write_then_check_passes_and_renders_from_the_file(tmp_path: Path) -> None:
    root = _tiny_repo(tmp_path)
    assert rt.check(root)  # "old" is not the table
    assert sorted(rt.write(root)) == sorted(t.path for t in rt.TARGETS)
    assert rt.check(root) == []
    readme = (root / "README.md").read_text(encoding="utf-8")
    assert (
        "| `pld` † | tiny, bf16, GSM8K | AMD EPYC, AVX512 (+bf16, vnni) | 1.88 | **1.50x** (run 0.90x) |"
        in readme
    )
    assert "[results/tiny.json](results/tiny.json): `fastforward bench --methods ar,pld" in readme
    assert "- `pld`, tiny, bf16, GSM8K: measured before the step gate." in readme
    assert readme.endswith(f"{rt.README.end}\n\nprose\n")  # text outside the markers is kept
    docs = (root / "docs" / "results.md").read_text(encoding="utf-8")
    assert "[results/tiny.json](../results/tiny.json)" in docs


def test_a_changed_number_in_the_results_file_fails_the_check(tmp_path: Path) -> None:
    root = _tiny_repo(tmp_path)
    rt.write(root)
    data = json.loads((root / "results" / "tiny.json").read_text(encoding="utf-8"))
    data["methods"]["pld"]["speedup_vs_ar"] = 1.3
    (root / "results" / "tiny.json").write_text(json.dumps(data), encoding="utf-8")
    problems = rt.check(root)
    assert len(problems) == 2  # README.md and docs/results.md
    assert problems[0].startswith("README.md:") and "1.50x" in problems[0]


def test_a_missing_json_path_names_the_row_and_the_path(tmp_path: Path) -> None:
    root = _tiny_repo(tmp_path)
    rows = json.loads((root / "results" / "readme_rows.json").read_text(encoding="utf-8"))
    rows[0]["speedup"] = "methods.pld.speedup_vs_fastest_ar"
    (root / "results" / "readme_rows.json").write_text(json.dumps(rows), encoding="utf-8")
    with pytest.raises(rt.ResultsTableError) as e:
        rt.check(root)
    msg = str(e.value)
    assert "`pld` | tiny, bf16, GSM8K" in msg
    assert "results/tiny.json" in msg and "'methods.pld.speedup_vs_fastest_ar'" in msg
    assert "missing: speedup_vs_fastest_ar" in msg


def test_an_ambiguous_list_selector_is_an_error_not_a_guess(tmp_path: Path) -> None:
    root = _tiny_repo(tmp_path)
    rows = json.loads((root / "results" / "readme_rows.json").read_text(encoding="utf-8"))
    rows[0]["note"] = "({x:runs[label=sd].speedup_vs_ar})"
    (root / "results" / "readme_rows.json").write_text(json.dumps(rows), encoding="utf-8")
    with pytest.raises(rt.ResultsTableError, match=r"\[label=sd\] \(0 matches\)"):
        rt.render(root, rt.README)


@pytest.mark.parametrize(
    ("hardware", "want"),
    [
        (
            "AMD EPYC, 2 cores, torch 2.13.0+cpu (2 threads); transformers 5.23.0",
            "AMD EPYC, ISA not recorded",
        ),
        ("AMD EPYC, ISA AVX2, 2 cores, torch 2.13.0+cpu (1 threads)", "AMD EPYC, AVX2"),
        (
            "Intel(R) Xeon(R) Processor (capped: ONEDNN_MAX_CPU_ISA=AVX2, ATEN_CPU_CAPABILITY=avx2), ISA AVX2, "
            "2 cores, torch 2.13.0+cpu (2 threads)",
            "Intel Xeon, AVX2 (capped: ONEDNN_MAX_CPU_ISA=AVX2, ATEN_CPU_CAPABILITY=avx2)",
        ),
        (None, "not recorded"),
    ],
)
def test_cpu_and_isa_come_from_the_hardware_line(hardware: str | None, want: str) -> None:
    assert rt.describe_cpu(hardware) == want
