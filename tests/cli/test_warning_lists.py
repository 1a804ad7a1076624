"""A warning that lists numbers lists a few whole ones and says how many (issue 11, user trial
item 6): `sweep -s <399 contexts> ...` printed every dropped context, some 2,000 characters cut
mid-number ("356,…") by the message line limit."""

from __future__ import annotations

import pytest

from kvcalc.cli.output import MESSAGE_LINE_CHARS
from kvcalc.text import number_list

#: 1k .. 399k: 399 contexts of 1,024 x i tokens; llama-3.1-8b's limit is 131,072 = 128 x 1,024,
#: so 129k .. 399k are beyond it: 399 - 128 = 271 contexts, the first 129 x 1,024 = 132,096,
#: then 133,120 and 134,144, the last 399 x 1,024 = 408,576
CONTEXTS = ",".join(f"{i}k" for i in range(1, 400))


@pytest.mark.parametrize(
    "values,text",
    [
        ([], ""),
        ([8192], "8,192"),
        ([1, 2, 3, 4], "1, 2, 3, 4"),  # four: all of them
        ([1, 2, 3, 4, 5], "1, 2, 3, ..., 5"),
        (list(range(10**6, 2 * 10**6)), "1,000,000, 1,000,001, 1,000,002, ..., 1,999,999"),
    ],
)
def test_number_list(values, text):
    assert number_list(values) == text


def test_number_list_with_another_most():
    assert number_list(range(10), 5) == "0, 1, 2, 3, ..., 9"
    assert number_list(range(3), 5) == "0, 1, 2"


def test_sweep_drop_warning_is_short_and_whole(cli):
    r = cli("sweep", "llama-3.1-8b", "-s", CONTEXTS, "--batch", "1,2,4,8", "--gpu", "h100-sxm", "-f", "json")
    assert r.exit_code == 0
    warnings = [line for line in r.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == [
        (
            "warning: dropped the 271 contexts of 132,096, 133,120, 134,144, ..., 408,576 tokens: "
            "beyond llama-3.1-8b's max_position_embeddings (131,072); --beyond-context keeps them"
        )
    ]
    assert len(warnings[0]) < MESSAGE_LINE_CHARS // 5 and "…" not in warnings[0]


def test_sweep_beyond_context_warning_likewise(cli):
    r = cli("sweep", "llama-3.1-8b", "-s", CONTEXTS, "--batch", "1", "--beyond-context", "-f", "json")
    assert r.exit_code == 0
    assert r.stderr.strip() == (
        "warning: the 271 contexts of 132,096, 133,120, 134,144, ..., 408,576 tokens are "
        "beyond llama-3.1-8b's max_position_embeddings (131,072); the model was not "
        "trained for them and engines refuse them"
    )


def test_a_few_dropped_contexts_are_all_named(cli):
    # 129k = 132,096 and 130k = 133,120 beyond 131,072; 1k kept
    r = cli("sweep", "llama-3.1-8b", "-s", "1k,129k,130k", "--batch", "1", "-f", "json")
    assert r.exit_code == 0
    assert r.stderr.strip() == (
        "warning: dropped the contexts of 132,096, 133,120 tokens: beyond llama-3.1-8b's "
        "max_position_embeddings (131,072); --beyond-context keeps them"
    )
