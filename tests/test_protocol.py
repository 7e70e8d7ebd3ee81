"""Prompt assembly, CFG negatives, context checks and chunk ranges (docs/model.md §1.3, §3.2)."""
from __future__ import annotations

import pytest

from stages.config import BYTE_LAYOUT, FULL_LAYOUT
from stages.protocol import (ProtocolError, SongRequest, check_context, chunk_ranges, given_abc_ids, negative_prefix,
                             plan_prefix, semantic_prefix)
from stages.tokenizer import ByteTokenizer

T, L = ByteTokenizer(), BYTE_LAYOUT
# The model's three instruction sentences, as docs/model.md §1.3 writes them (not the code's own table).
SENTENCES = {
    "full": "Generate a chord-annotated ABC transcription, then generate music with codec tokens from the given "
            "conditions.",
    "melody": "Generate a melody-only ABC transcription without chord symbols, then generate music with codec tokens "
              "from the given conditions.",
    "off": "Generate music with codec tokens from the given conditions.",
}


def enc(text):
    return list(text.encode())


def test_layout_ids_follow_the_general_rule():
    assert (FULL_LAYOUT.eod, FULL_LAYOUT.abc_start, FULL_LAYOUT.abc_end) == (151643, 151847, 151848)
    assert (FULL_LAYOUT.music_start, FULL_LAYOUT.music_end, FULL_LAYOUT.codec_offset) == (151851, 151852, 151853)
    assert (FULL_LAYOUT.latent_start, FULL_LAYOUT.min_vocab) == (184621, 184704)
    assert (L.eod, L.abc_start, L.abc_end, L.music_start, L.music_end, L.codec_offset) == (256, 460, 461, 464, 465,
                                                                                          466)
    assert (L.latent_start, L.min_vocab) == (530, 640)


@pytest.mark.parametrize("cot", ["full", "melody", "off"])
def test_prompt_text_and_prefixes(cot):
    r = SongRequest(style="rock", lyrics="la la", cot=cot)
    text = f"{SENTENCES[cot]}\n[Tags]\nrock\n[Lyrics]\nla la\n"
    assert r.text() == text
    base = [256] + enc(text)
    if cot == "off":
        assert not r.has_plan_stage
        assert semantic_prefix(r, T, L, None) == base + [460, 461, 464]
    else:
        assert plan_prefix(r, T, L) == base + [460]
        assert semantic_prefix(r, T, L, [65, 66]) == base + [460, 65, 66, 461, 464]


def test_cfg_negative_prefixes_and_default_guidance():
    off = SongRequest(style="rock", lyrics="x", cot="off")
    assert off.cfg_scale == 1.01
    assert negative_prefix(off, T, L, None) == [256] + enc(SENTENCES["off"]) + [464]
    full = SongRequest(style="rock", lyrics="x", cot="full")
    assert full.cfg_scale == 1.0 and negative_prefix(full, T, L, [7]) is None
    guided = SongRequest(style="rock", lyrics="x", cot="melody", guidance=1.5)
    assert negative_prefix(guided, T, L, [7, 8]) == [256] + enc(SENTENCES["melody"]) + [460, 7, 8, 461, 464]


def test_user_abc_replaces_the_plan_stage():
    r = SongRequest(style="s", lyrics="x", abc="X:1\nK:C\nCDE|")
    assert not r.has_plan_stage
    assert given_abc_ids(r, T, L) == enc("X:1\nK:C\nCDE|")
    ids = SongRequest(style="s", lyrics="x", abc_ids=(1, 2, 3))
    assert given_abc_ids(ids, T, L) == [1, 2, 3]
    with pytest.raises(ProtocolError, match="outside the text range"):
        given_abc_ids(SongRequest(style="s", lyrics="x", abc_ids=(1, 300)), T, L)


@pytest.mark.parametrize("kwargs, message", [
    ({"cot": "medium"}, "cot must be one of"),
    ({"lyrics": "  \n"}, "lyrics are empty"),
    ({"cot": "off", "abc": "X:1"}, "needs cot full or melody"),
    ({"abc": " "}, "ABC score is empty"),
    ({"seed": -1}, "seed"),
])
def test_bad_requests_are_named(kwargs, message):
    with pytest.raises(ProtocolError, match=message):
        SongRequest(**{"style": "s", "lyrics": "x", **kwargs})


def test_context_check_and_chunk_ranges():
    check_context(500, 12, 512, "plan")
    with pytest.raises(ProtocolError, match="exceeds the model context of 512"):
        check_context(500, 13, 512, "plan")
    assert chunk_ranges(11, 2, 15) == [(0, 5), (5, 10), (10, 11)]
    assert chunk_ranges(5371, 4500, 24576) == [(0, 5371)]
    with pytest.raises(ProtocolError):
        chunk_ranges(3, 13, 15)
