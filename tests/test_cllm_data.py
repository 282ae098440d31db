"""Trajectory records (both layouts), the resumable writer, augmentation and cleaning rules."""

from __future__ import annotations

import json
import random

import pytest

from fastforward.cllm.augment import CleanConfig, augment, augment_state, bad_block_reason, clean
from fastforward.cllm.trajectories import (
    TrajectoryRecord,
    TrajectoryWriter,
    from_json,
    read_records,
    repair_tail,
    to_consistency_llm,
)
from fastforward.errors import FastForwardError
from fastforward.eval.repetition import longest_run, max_ngram_count, repeated_sentence


def rec(pid="p", b=0, prompt=(1, 2, 3), traj=((7, 7, 7), (4, 7, 7), (4, 5, 6)), answer=None, plen=None):
    return TrajectoryRecord(
        prompt_id=pid,
        block_index=b,
        prompt_len=plen or len(prompt),
        prompt_ids=list(prompt),
        trajectory=[list(s) for s in traj],
        answer_ids=answer,
    )


def test_native_round_trip(tmp_path):
    r = rec(answer=[9, 9, 0])
    r2 = from_json(json.loads(json.dumps(r.to_json())))
    assert r2 == r and r2.fixed_point == [4, 5, 6] and r2.teacher_output_ids == [1, 2, 3, 4, 5, 6]


def test_consistency_llm_layout_round_trip_jsonl_and_json_array(tmp_path):
    r = rec(b=2, prompt=(1, 2, 3, 8, 8), plen=3, answer=[9, 9])
    cl = to_consistency_llm(r)
    assert cl["data_id"] == "p" and cl["jacobian_itr_id"] == "itr_2"
    assert cl["prompt_ids"] == [[1, 2, 3, 8, 8]] and cl["answer_trajectory_ids"][-1] == [4, 5, 6]
    assert cl["teacher_output_ids"] == [[1, 2, 3, 8, 8, 4, 5, 6]]
    assert cl["labels_ids"] == [[1, 2, 3, 9, 9]]
    (tmp_path / "a.jsonl").write_text(json.dumps(cl) + "\n")
    (tmp_path / "b.json").write_text(json.dumps([cl, cl]))
    for back in (read_records(tmp_path / "a.jsonl")[0], read_records(tmp_path / "b.json")[1]):
        assert (back.prompt_id, back.block_index, back.prompt_len) == ("p", 2, 3)
        assert back.prompt_ids == r.prompt_ids and back.trajectory == r.trajectory
        assert back.answer_ids == [9, 9]


def test_corrupt_file_names_file_and_line(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text(json.dumps(rec().to_json()) + "\n{not json\n")
    with pytest.raises(FastForwardError, match=r"t\.jsonl:2"):
        read_records(p)
    bad = rec().to_json()
    bad["trajectory"] = [[1, 2], [1, 2, 3]]
    p.write_text(json.dumps(rec().to_json()) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(FastForwardError, match=r"t\.jsonl:2: invalid"):
        read_records(p)


def test_writer_truncates_torn_tail_and_never_duplicates(tmp_path):
    p = tmp_path / "t.jsonl"
    with TrajectoryWriter(p) as w:
        w.write(rec(b=0))
        w.write(rec(b=1))
    with p.open("a") as f:
        f.write('{"prompt_id": "p", "block_ind')  # SIGKILL mid-write
    with TrajectoryWriter(p) as w:
        assert w.torn_bytes > 0
        assert w.existing == {("p", 0), ("p", 1)}
        w.write(rec(b=1))  # duplicate ignored
        w.write(rec(b=2))
    assert [r.block_index for r in read_records(p)] == [0, 1, 2]
    assert repair_tail(p) == 0


def test_detectors():
    assert longest_run([1, 2, 2, 2, 3]) == 3
    assert max_ngram_count([1, 2, 1, 2, 1, 2], 2) == 3
    assert max_ngram_count([1, 2, 1, 2, 5, 6], 2, new_from=5) == 1  # only n-grams ending in the new part
    delim = {0}
    s = [5, 6, 7, 0]
    assert repeated_sentence(s + s, delim, 3)
    assert not repeated_sentence(s + [5, 6, 8, 0], delim, 3)
    assert not repeated_sentence(s + s, delim, 4)  # sentence shorter than min_len (delimiter excluded)


def test_cleaning_drops_runs_ngrams_sentences_and_counts_them():
    cfg = CleanConfig(max_run=10, ngram=3, max_ngram_repeats=3, min_sentence_tokens=3)
    prompt = (1, 2)
    ok = rec("a", 0, prompt, [[5] * 4, list(range(10, 14))])
    run = rec("b", 0, prompt, [[5] * 12, [7] * 12])
    ngram = rec("c", 0, prompt, [[0] * 9, [1, 2, 3] * 3])
    sent1 = rec("d", 0, prompt, [[0] * 4, [20, 21, 22, 99]])
    sent2 = rec("d", 1, prompt + (20, 21, 22, 99), [[0] * 4, [20, 21, 22, 99]], plen=2)
    sent3 = rec("d", 2, prompt + (20, 21, 22, 99) * 2, [[0] * 2, [30, 31]], plen=2)
    assert bad_block_reason(ok, cfg) is None
    assert bad_block_reason(run, cfg) == "run"
    assert bad_block_reason(ngram, cfg) == "ngram"
    assert bad_block_reason(sent2, cfg, {99}) == "sentence"
    kept, report = clean([ok, run, ngram, sent1, sent2, sent3], cfg, {99})
    assert [r.key for r in kept] == [("a", 0), ("d", 0)]
    assert (report.dropped_run, report.dropped_ngram, report.dropped_sentence) == (1, 1, 1)
    assert report.dropped_after_bad_block == 1 and report.kept == 2 and report.records_in == 6
    # a run across a block boundary counts; a run of 9 does not
    edge = rec("e", 1, prompt + (4,) * 5, [[0] * 5, [4] * 5], plen=2)
    assert bad_block_reason(edge, cfg) == "run"
    runs_only = CleanConfig(max_run=10, max_ngram_repeats=0, min_sentence_tokens=0)
    assert bad_block_reason(rec("f", 0, prompt, [[0] * 9, [4] * 9]), runs_only) is None
    assert bad_block_reason(rec("f", 0, prompt, [[0] * 10, [4] * 10]), runs_only) == "run"


def test_augmentation_never_corrects_the_first_wrong_token():
    fixed = [1, 2, 3, 4, 5, 6]
    state = [1, 9, 9, 9, 9, 9]
    rng = random.Random(0)
    for _ in range(200):
        a = augment_state(state, fixed, rng)
        assert a[1] == 9  # the first wrong token stays wrong
        assert a[0] == 1
        fixed_now = sum(x == y for x, y in zip(a, fixed, strict=True))
        assert 2 <= fixed_now <= 5  # at least one corrected, never all
    assert augment_state([1, 9, 3, 4, 5, 6], fixed, rng) is None  # only one wrong: nothing to do


def test_augment_adds_states_deterministically_from_intermediate_states_only():
    traj = ([9, 9, 9, 9, 9], [1, 9, 9, 9, 9], [1, 2, 3, 4, 5])
    r1, r2 = rec(traj=traj), rec(traj=traj)
    n = augment([r1], seed=3, per_state=4)
    augment([r2], seed=3, per_state=4)
    assert n == len(r1.meta["augmented"]) > 0 and r1.meta == r2.meta
    for a in r1.meta["augmented"]:
        assert a[:2] == [1, 9]  # only the intermediate state is used; its first wrong token stays wrong
        assert a[2:] != [9, 9, 9] and a != [1, 2, 3, 4, 5]
    assert augment([rec(traj=([9, 9, 9], [1, 2, 3]))]) == 0  # no intermediate state
