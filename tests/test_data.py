"""Data loaders on the real shipped files, the GSM8K split, answer extraction, and user JSONL errors."""

from __future__ import annotations

import json

import pytest

from fastforward.data import gsm8k, load_dataset, render_prompt
from fastforward.data.sharegpt import iter_json_array
from fastforward.errors import FastForwardError


def test_gsm8k_split_is_disjoint_documented_and_complete():
    held = load_dataset("gsm8k", split="heldout")
    train = load_dataset("gsm8k", split="train")
    assert len(held) == 330 and len(train) == 989
    assert not {s.id for s in held} & {s.id for s in train}
    assert all(s.meta["index"] % 4 == 0 for s in held)
    assert held[0].answer == "18"  # Janet's ducks


@pytest.mark.parametrize(
    "text, expected",
    [
        ("so the total is 1,234 dollars.\n#### 1,234", "1234"),
        ("The answer is $18.00", "18"),
        ("no number", None),
        ("first 3 then -7.5", "-7.5"),
    ],
)
def test_gsm8k_answer_extraction(text, expected):
    assert gsm8k.extract_answer(text) == expected


def test_real_humaneval_and_mtbench_files():
    he = load_dataset("humaneval")
    assert len(he) == 164 and he[0].meta["entry_point"] == "has_close_elements"
    mt = load_dataset("mtbench")
    assert len(mt) == 80 and all(len(s.turns) == 2 for s in mt)


def test_sharegpt_real_file_streams_and_limit_stops_early():
    samples = load_dataset("sharegpt", limit=50)
    assert len(samples) == 50 and all(s.turns and s.turns[0] for s in samples)


def test_truncated_json_array_yields_complete_objects_only(tmp_path):
    p = tmp_path / "t.json"
    p.write_text(
        '[\n {"id": "a", "conversations": []},\n {"id": "b", "x": [1, 2]},\n {"id": "c", "conv": "cut of'
    )
    assert [o["id"] for o in iter_json_array(p, chunk_size=7)] == ["a", "b"]


def test_user_jsonl_formats_and_errors(tmp_path):
    good = tmp_path / "mine.jsonl"
    good.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {"prompt": "hello"},
                {"question": "2+2?", "answer": 4},
                {"turns": ["a", "b"]},
                {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]},
            ]
        )
    )
    got = load_dataset("ignored", data_path=str(good))
    assert [s.turns for s in got] == [("hello",), ("2+2?",), ("a", "b"), ("u",)] and got[1].answer == "4"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{not json\n')
    with pytest.raises(FastForwardError, match="bad.jsonl:2"):
        load_dataset("x", data_path=str(bad))
    with pytest.raises(FastForwardError, match="not found"):
        load_dataset("x", data_path=str(tmp_path / "missing.jsonl"))
    with pytest.raises(FastForwardError, match="unknown dataset"):
        load_dataset("wikitext")


def test_render_prompt_uses_chat_template(smollm2):
    ids = render_prompt(smollm2.tokenizer, [{"role": "user", "content": "Hi"}])
    text = smollm2.tokenizer.decode(ids)
    assert "<|im_start|>user\nHi<|im_end|>" in text and text.rstrip().endswith("<|im_start|>assistant")
