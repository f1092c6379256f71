"""clustersim.memo.RepeatMemo: a value is kept from its key's second offer, within a limit."""

from __future__ import annotations

from clustersim.memo import RepeatMemo


def test_a_value_is_kept_from_the_second_offer_of_its_key() -> None:
    memo: RepeatMemo[str] = RepeatMemo(limit=4)
    memo.offer("a", "first")
    assert memo.get("a") is None  # asked once: nothing kept
    memo.offer("a", "second")
    assert memo.get("a") == "second"
    memo.clear()
    assert memo.get("a") is None and not memo.asked


def test_the_memo_holds_at_most_limit_values_and_keys() -> None:
    """Full, it starts again (as the package's other caches): never more than ``limit``."""
    memo: RepeatMemo[int] = RepeatMemo(limit=3)
    for key in range(3):
        memo.offer(key, key)
        memo.offer(key, key + 10)
    assert [memo.get(k) for k in range(3)] == [10, 11, 12]
    memo.offer(3, 3)  # a fourth key asked for: the asked keys start again
    memo.offer(3, 13)  # and a fourth value: the kept ones do
    assert len(memo.kept) == 1 and memo.get(3) == 13 and memo.get(0) is None
    for key in range(100):
        memo.offer(key % 7, key)
        assert len(memo.kept) <= 3 and len(memo.asked) <= 3
