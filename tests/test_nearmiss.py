"""The near-miss rules (sink/nearmiss.py): the edit distance, and the index that finds
candidates without scanning the live inboxes."""

from __future__ import annotations

import random
import string

import pytest

from sink.nearmiss import (
    LiveAddress,
    NearIndex,
    deletion_variants,
    normal_local_part,
    osa_distance,
)

LOCAL = "rk3j9dq2m7xv4p8wz6ha1"
T0 = 1_000.0


def live(local: str = LOCAL, domain: str = "sink.test", inbox_id: str = "ib_1") -> LiveAddress:
    return LiveAddress(inbox_id, "run-1", f"{local}@{domain}", T0, T0 + 600)


def index_of(*addresses: LiveAddress) -> NearIndex:
    index = NearIndex()
    for address in addresses:
        index.add(address)
    return index


@pytest.mark.parametrize(
    ("a", "b", "distance"),
    [
        ("abcdef", "abcdef", 0),
        ("abcdef", "abxdef", 1),  # substitute
        ("abcdef", "abcdf", 1),  # delete
        ("abcdef", "abcdeff", 1),  # insert
        ("abcdef", "abdcef", 1),  # swap of neighbours: one edit, not two
        ("abcdef", "badcef", 2),  # two swaps
        ("abcdef", "xbcdey", 2),
        ("abcdef", "xycdez", 3),  # past the limit: limit + 1
        ("abcdef", "abcdefghi", 3),
        ("ca", "abc", 3),  # OSA, not full Damerau (which says 2)
    ],
)
def test_the_distance_counts_insert_delete_substitute_and_a_swap_as_one(
    a: str, b: str, distance: int
) -> None:
    """Optimal string alignment distance, capped at the limit plus one."""
    assert osa_distance(a, b) == distance
    assert osa_distance(b, a) == distance


def test_the_distance_agrees_with_a_plain_full_computation() -> None:
    """The early stop never changes an answer within the limit (random strings)."""
    rng = random.Random(7)

    def full(a: str, b: str) -> int:
        d = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
        for i in range(len(a) + 1):
            d[i][0] = i
        for j in range(len(b) + 1):
            d[0][j] = j
        for i in range(1, len(a) + 1):
            for j in range(1, len(b) + 1):
                cost = 0 if a[i - 1] == b[j - 1] else 1
                d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost)
                if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                    d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
        return d[len(a)][len(b)]

    for _ in range(2000):
        a = "".join(rng.choice("abc") for _ in range(rng.randint(0, 7)))
        b = "".join(rng.choice("abc") for _ in range(rng.randint(0, 7)))
        assert osa_distance(a, b) == min(full(a, b), 3), (a, b)


def test_deletion_variants_are_the_word_with_up_to_two_characters_gone() -> None:
    """ "abc": itself, three with one gone, three with two gone."""
    assert deletion_variants("abc") == {"abc", "bc", "ac", "ab", "a", "b", "c"}


def test_a_local_part_is_compared_lowercased_without_its_tag_or_quotes() -> None:
    """What routing does to a local part, near-miss lookup does too."""
    assert normal_local_part("RK3J+signup") == "rk3j"
    assert normal_local_part('"Rk3j"') == "rk3j"


@pytest.mark.parametrize(
    ("recipient", "distance"),
    [
        (f"{LOCAL[:5]}x{LOCAL[6:]}@sink.test", 1),  # one letter wrong
        (f"{LOCAL[:5]}{LOCAL[6]}{LOCAL[5]}{LOCAL[7:]}@sink.test", 1),  # neighbours swapped
        (f"{LOCAL[:-1]}@sink.test", 1),  # one letter short
        (f"{LOCAL}q@sink.test", 1),  # one letter more
        (f"{LOCAL[:3]}{LOCAL[4:-1]}@sink.test", 2),
        (f"{LOCAL[:-1]}+signup@sink.test", 1),  # the tag is not an edit
        (f"{LOCAL.upper()[:-1]}@SINK.TEST", 1),  # nor is case
        (f"{LOCAL}@sink.tset", 1),  # the domain mistyped
        (f"{LOCAL}@snik.tset", 2),
        (f"{LOCAL[:-1]}@sink.tst", 2),  # both: the edits of the whole address
    ],
)
def test_mail_within_two_edits_of_a_live_inbox_is_a_near_miss(
    recipient: str, distance: int
) -> None:
    """A near miss names the inbox, the caught address as sent, and the edits between."""
    found = index_of(live()).find([recipient], T0 + 1)
    assert [(f.inbox_id, f.address, f.distance) for f in found] == [("ib_1", recipient, distance)]


@pytest.mark.parametrize(
    "recipient",
    [
        f"{LOCAL[:3]}xyz{LOCAL[6:]}@sink.test",  # three letters wrong
        f"{LOCAL[:-3]}@sink.test",  # three short
        f"{LOCAL[:-1]}@example.test",  # another domain altogether
        f"{LOCAL}@sink.example",
        f"+{LOCAL}@sink.test",  # the tag is everything: no local part left
        "postmaster@sink.test",
    ],
)
def test_mail_further_away_is_no_near_miss(recipient: str) -> None:
    """Three edits, or a domain more than two edits away, is someone else's mail."""
    assert index_of(live()).find([recipient], T0 + 1) == []


def test_mail_from_before_the_inbox_or_after_its_lease_is_no_near_miss() -> None:
    """Mail that arrived before the inbox existed (or after it ended) was never meant for it."""
    index = index_of(live())
    typo = f"{LOCAL[:-1]}@sink.test"
    assert index.find([typo], T0 - 1) == []
    assert index.find([typo], T0 + 600) == []
    assert len(index.find([typo], T0)) == 1


def test_an_inbox_removed_from_the_index_is_never_found_again() -> None:
    """Expired (or released) inboxes leave the index, and their keys with them."""
    index = index_of(live(), live(LOCAL[:-2] + "zz", inbox_id="ib_2"))
    typo = f"{LOCAL[:-1]}@sink.test"
    assert {f.inbox_id for f in index.find([typo], T0 + 1)} == {"ib_1", "ib_2"}
    index.remove(["ib_1"])
    assert [f.inbox_id for f in index.find([typo], T0 + 1)] == ["ib_2"]
    index.remove(["ib_2"])
    assert index.find([typo], T0 + 1) == [] and len(index) == 0


def test_keep_only_makes_the_index_exactly_the_live_inboxes_given() -> None:
    """A reconnect's reload: ends missed meanwhile go, creates missed meanwhile come."""
    index = index_of(live(inbox_id="ib_1"))
    index.keep_only([live("a" * 21, inbox_id="ib_2")])
    assert "ib_1" not in index and "ib_2" in index
    assert index.find([f"{'a' * 20}@sink.test"], T0 + 1)[0].inbox_id == "ib_2"


def test_one_caught_mail_is_one_near_miss_per_inbox_at_its_closest_recipient() -> None:
    """Two recipients near the same inbox: one near miss, the closer one."""
    close, far = f"{LOCAL[:-1]}@sink.test", f"{LOCAL[:-2]}@sink.test"
    found = index_of(live()).find([far, close], T0 + 1)
    assert [(f.address, f.distance) for f in found] == [(close, 1)]


def test_the_index_finds_every_live_inbox_within_two_edits_and_no_other() -> None:
    """Random local parts, short and long, against random edits of them and of each other:
    what the index finds is exactly what the distance to every inbox says."""
    rng = random.Random(11)
    alphabet = "abc"  # few letters: many near pairs, swaps and repeats

    def mutated(word: str) -> str:
        for _ in range(rng.randint(1, 2)):
            i = rng.randint(0, len(word))
            op = rng.choice("isdx")
            if op == "i":
                word = word[:i] + rng.choice(alphabet) + word[i:]
            elif op == "s" and i < len(word):
                word = word[:i] + rng.choice(alphabet) + word[i + 1 :]
            elif op == "d" and i < len(word):
                word = word[:i] + word[i + 1 :]
            elif op == "x" and i + 1 < len(word):
                word = word[:i] + word[i + 1] + word[i] + word[i + 2 :]
        return word

    locals_ = {"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 16))) for _ in range(60)}
    inboxes = [live(local, inbox_id=f"ib_{n}") for n, local in enumerate(sorted(locals_))]
    index = index_of(*inboxes)
    for _ in range(600):
        query = mutated(rng.choice(inboxes).local_part)
        if not query:
            continue
        expected = {a.inbox_id for a in inboxes if osa_distance(query, a.local_part) <= 2}
        expected -= {a.inbox_id for a in inboxes if a.local_part == query}  # it would route
        found = {f.inbox_id for f in index.find([f"{query}@sink.test"], T0 + 1)}
        assert found == expected, query


def test_among_many_live_inboxes_only_the_near_one_is_found() -> None:
    """Ten thousand random live local parts: the typo finds its inbox, nothing else."""
    rng = random.Random(3)
    alphabet = string.ascii_lowercase + string.digits
    index = NearIndex()
    for n in range(10_000):
        local = "r" + "".join(rng.choice(alphabet) for _ in range(20))
        index.add(live(local, inbox_id=f"ib_random_{n}"))
    index.add(live())
    found = index.find([f"{LOCAL[:4]}{LOCAL[5:]}@sink.test"], T0 + 1)
    assert [f.inbox_id for f in found] == ["ib_1"]
