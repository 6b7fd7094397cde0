"""Webhooks (contract v3): signed, retried, durable delivery of live events to a URL.

The story, in file order: ``model.py`` (a webhook, its filter, a delivery and its attempts),
``port.py`` (what a store keeps for them: the outbox, written in the commit of its event;
``rows.py``, the rows the SQL adapters keep), ``schedule.py`` (when to retry), and
``worker.py`` (takes due deliveries from the outbox, settles each attempt), ``attempt.py``
(one attempt: signed with ``sink/webhook_signature.py``, posted over ``http.py``, its answer
read by ``answer.py``) and ``child.py`` (the process that makes the attempts, off the loop
that takes mail).
"""
