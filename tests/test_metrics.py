from __future__ import annotations

from sink.metrics import Metrics


def test_message_counts_add_up_per_outcome_and_appear_once_counted() -> None:
    """Message counts add up per outcome; an outcome not yet counted is not exposed."""
    metrics = Metrics()
    metrics.message("stored", 2)
    metrics.message("stored")
    metrics.message("caught")
    text = metrics.exposition().decode()
    assert 'runsink_messages_total{outcome="stored"} 3.0' in text
    assert 'runsink_messages_total{outcome="caught"} 1.0' in text
    assert 'outcome="rejected"' not in text
