"""The run's batch ledger as its Ray workers hold it: stops at a cancel, and commits through the
object store on a node other than the driver's.

Kept apart from ``resume_record`` so that unpickling it in an actor imports no plan layer.
"""

from __future__ import annotations

from typing import Any

from semray.cluster.nodes import current_node_id
from semray.transactions import BatchLedger, RowLookup
from semray.transactions.registry import CANCEL_MARKER, cancelled_error, stopped_error


class CancellableLedger(BatchLedger):
    """The run's batch ledger as semantic actors hold it: a cancel request stops the next batch.

    Every semantic batch starts with ``lookup_rows``; raising ``RunCancelledError`` there makes
    ``semray runs cancel ID`` take effect between batches, in the actors, even when the driver
    waits on a pipeline breaker and sees no rows. On another node than the driver's (``away``,
    with ``Settings.state_uri``) the stop is the store's ``CANCEL`` object, which the driver's
    mirror writes when the run is asked to stop.
    """

    def node(self) -> str | None:
        return current_node_id()

    def lookup_rows(self, operator_key: str, row_ids: Any) -> RowLookup:
        if self.away:
            reason = self._store.cancel_requested(self.run_dir.name)
            if reason is not None:
                raise cancelled_error(self.run_dir.name, reason)
        elif (self.run_dir / CANCEL_MARKER).exists():
            raise stopped_error(self.run_dir)  # says why: a cancel, or a budget reached
        return super().lookup_rows(operator_key, row_ids)


def actor_ledger(ledger: BatchLedger) -> CancellableLedger:
    """The driver's ``ledger`` for its workers; call it once connected to Ray (its node is their home)."""
    home = current_node_id() if ledger.store_uri else None
    return CancellableLedger(ledger.run_dir, ledger.attempt, ledger.inline_bytes, ledger.store_uri, home)
