"""Transactions as Pulsar has them: a transaction's identity (`TxnID`) and end (`TxnAction`), the
coordinator side that opens, tracks and ends transactions, and the topic side (transaction buffer,
pending acknowledgements) that holds a transaction's messages and acknowledgements until it ends.
The two sides meet only through `TxnParticipant`."""

from ._host import TxnParticipant
from ._txnid import TxnAction, TxnID

__all__ = ["TxnAction", "TxnID", "TxnParticipant"]
