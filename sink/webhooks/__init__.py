"""Webhooks (contract v3): signed, retried, durable delivery of live events to a URL.

The story, in file order: ``model.py`` (a webhook, its filter, a delivery and its attempts),
``port.py`` (what a store keeps for them: the outbox, written in the commit of its event;
``rows.py``, the rows the SQL adapters keep), ``schedule.py`` (when to retry), and
``worker.py`` (takes due deliveries from the outbox, signs them with
``sink/webhook_signature.py``, posts them over ``http.py``, settles each attempt).
"""
